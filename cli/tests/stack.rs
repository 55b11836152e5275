//! `dsipc stack` end to end: against real runtimes (.NET 8.0.4 and .NET Core 3.1.23 hosted
//! with `host.py --sleeping-thread`, a thread named `dsipc-sleeper` in `Thread.Sleep`; needs
//! `scripts/setup-runtimes.sh`), and against the fake runtime for a runtime that dies
//! mid-stream or goes silent. Every run is bounded; tests wait for the host's READY line,
//! never on sleeps.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{dsipc, dsipc_in, fake, me, Run};
use dsipc::Command as Cmd;
use dsipc_testkit::{Answer, Config, HostOptions, HostedRuntime, StreamSpec, TempDir};

const SLEEP_FRAME: &str = "System.Private.CoreLib!System.Threading.Thread.Sleep(int32)";

fn sleeping_host(runtime: &str) -> (HostedRuntime, String) {
    common::configure_python();
    let mut opts = HostOptions::net8(120);
    opts.runtime = runtime.to_string();
    opts.args.push("--sleeping-thread".into());
    let mut host = HostedRuntime::spawn(&opts).expect("spawn host");
    let ready = host
        .wait_ready(Duration::from_secs(90))
        .expect("host READY");
    (host, ready.pid.to_string())
}

/// The text report's blocks: (thread id, frames).
fn blocks(text: &str) -> Vec<(u64, Vec<String>)> {
    let mut out: Vec<(u64, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Thread (0x") {
            let hex = rest.strip_suffix("):").expect("header ends with '):'");
            out.push((u64::from_str_radix(hex, 16).expect("hex id"), Vec::new()));
        } else if let Some(frame) = line.strip_prefix("  ") {
            out.last_mut()
                .expect("a frame after a header")
                .1
                .push(frame.to_string());
        } else {
            assert_eq!(line, "", "unexpected line in {}", text);
        }
    }
    out
}

/// The sleeper's block: the thread whose innermost frame is Thread.Sleep.
fn sleeper(text: &str) -> (u64, Vec<String>) {
    blocks(text)
        .into_iter()
        .find(|(_, f)| f.first().map(String::as_str) == Some(SLEEP_FRAME))
        .unwrap_or_else(|| panic!("no thread in {}:\n{}", SLEEP_FRAME, text))
}

fn ok(r: &Run) {
    r.assert_no_panic();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(5), "took {:?}", r.took);
}

/// A JSON frame as the text report prints it.
fn frame_name(f: &json::Value) -> String {
    let s = |k: &str| f.get(k).and_then(json::Value::as_str).expect(k).to_string();
    let method = s("methodName");
    if method == "[Native Frames]" {
        assert_eq!(f.get("methodToken").and_then(json::Value::as_u64), Some(0));
        return method;
    }
    let module = s("moduleName");
    let params: Vec<String> = f
        .get("parameterTypes")
        .and_then(json::Value::as_array)
        .expect("parameterTypes")
        .iter()
        .map(|p| p.as_str().expect("a parameter type").to_string())
        .collect();
    let type_name = s("typeName");
    assert!(f.get("methodToken").and_then(json::Value::as_u64).is_some());
    assert_eq!(s("moduleVersionId"), "00000000-0000-0000-0000-000000000000");
    format!(
        "{}!{}{}{}({})",
        if module.is_empty() { "?" } else { &module },
        type_name,
        if type_name.is_empty() { "" } else { "." },
        method,
        params.join(",")
    )
}

/// Text and JSON reports of the sleeping host: the sleeper's stack in both, the same.
fn check_runtime(runtime: &str, named: bool) {
    let (_host, pid) = sleeping_host(runtime);
    let text = dsipc(&["stack", &pid]);
    ok(&text);
    let (tid, frames) = sleeper(&text.stdout);
    assert!(frames.len() >= 2, "{:?}", frames);

    let j = dsipc(&["stack", &pid, "--format", "json", "--timeout", "5"]);
    ok(&j);
    assert_eq!(j.stdout.lines().count(), 1, "{}", j.stdout);
    let doc = json::parse(j.stdout.trim_end()).unwrap_or_else(|e| panic!("{}: {}", e, j.stdout));
    let stacks = doc
        .get("stacks")
        .and_then(json::Value::as_array)
        .expect("stacks");
    assert!(!stacks.is_empty());
    let mut found = false;
    for s in stacks {
        let id = s
            .get("threadId")
            .and_then(json::Value::as_u64)
            .expect("threadId");
        let name = s
            .get("threadName")
            .and_then(json::Value::as_str)
            .expect("threadName");
        let frames_json = s
            .get("frames")
            .and_then(json::Value::as_array)
            .expect("frames");
        if id == tid {
            found = true;
            let names: Vec<String> = frames_json.iter().map(frame_name).collect();
            assert_eq!(names, frames, "json vs text for thread {:#x}", tid);
            let sleep = &frames_json[0];
            assert_eq!(
                sleep
                    .get("methodToken")
                    .and_then(json::Value::as_u64)
                    .map(|t| t >> 24),
                Some(0x06)
            );
            if named {
                assert_eq!(name, "dsipc-sleeper");
            }
        }
    }
    assert!(found, "thread {:#x} not in {}", tid, j.stdout);
}

#[test]
fn net8_sleeping_thread_text_and_json() {
    check_runtime("net8", true);
}

#[test]
fn netcore31_sleeping_thread_text_and_json() {
    // .NET Core 3.1 does not give OS threads the managed name.
    check_runtime("netcore31", false);
}

#[test]
fn no_such_process_is_exit_1() {
    // Pid 0x7ffffffe is above Linux's pid_max.
    let r = dsipc(&["stack", "2147483646"]);
    r.assert_no_panic();
    r.assert_exit(1, &["no process with pid 2147483646"]);
    assert_eq!(r.stdout, "");
    dsipc(&["stack", "1", "--format", "xml"]).assert_usage("--format must be text or json");
    dsipc(&["stack"]).assert_usage("PID");
}

/// The first `n` bytes of a real .NET 8 capture (samples with stacks), leaked for the fake.
fn capture_prefix(n: usize) -> &'static [u8] {
    let path = common::repo_root().join("tests/data/nettrace/net8.0.4-busy.nettrace");
    let bytes = std::fs::read(&path).expect("capture");
    Box::leak(bytes[..n.min(bytes.len())].to_vec().into_boxed_slice())
}

/// A committed capture, whole (gunzipped if it ends in .gz), leaked for the fake.
fn capture(name: &str) -> &'static [u8] {
    let path = common::repo_root().join("tests/data/nettrace").join(name);
    let bytes = if name.ends_with(".gz") {
        let out = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(&path)
            .output()
            .expect("gzip runs");
        assert!(out.status.success(), "gzip -dc {}", path.display());
        out.stdout
    } else {
        std::fs::read(&path).expect("capture")
    };
    Box::leak(bytes.into_boxed_slice())
}

#[test]
fn a_whole_recorded_stream_gives_its_threads_and_one_without_samples_none() {
    // The .NET 8 Regex capture (with rundown) served whole (it ends by itself): its
    // threads' latest stacks, the Regex thread's named by the rundown.
    let dir = TempDir::new("dsipc-stack-regex").unwrap();
    let _rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::content(capture("regex-net8.0.4.nettrace.gz")))
            // The stop is answered, the stream goes on to its end (as a runtime's does,
            // with the rundown after the stop; the fake would just cut it).
            .answer(Cmd::StopTracing, Answer::IgnoreStop),
    );
    let r = dsipc_in(dir.path(), &["stack", &me()]);
    r.assert_no_panic();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let b = blocks(&r.stdout);
    assert!(!b.is_empty());
    assert!(
        b.iter().any(|(_, f)| f
            .iter()
            .any(|n| n.starts_with("System.Text.RegularExpressions!"))),
        "{}",
        r.stdout
    );
    // A heap walk has no samples: nothing to show, said on stderr, exit 0 (as dotnet-stack).
    let dir = TempDir::new("dsipc-stack-none").unwrap();
    let _rt = fake(
        &dir,
        Config::new().stream(StreamSpec::content(capture("heap-net8.0.4.nettrace.gz"))),
    );
    let r = dsipc_in(dir.path(), &["stack", &me(), "--format", "json"]);
    r.assert_no_panic();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, "{\"stacks\":[]}\n");
    assert!(
        r.stderr.contains("no thread had managed frames"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_runtime_dying_mid_stream_is_exit_1() {
    let dir = TempDir::new("dsipc-stack-dies").unwrap();
    let _rt = fake(
        &dir,
        Config::new().stream(StreamSpec::content(capture_prefix(60_000))),
    );
    let r = dsipc_in(dir.path(), &["stack", &me(), "--timeout", "5"]);
    r.assert_no_panic();
    r.assert_exit(1, &["ended"]);
    assert_eq!(r.stdout, "");
}

/// A runtime that streams on past the 256 MiB bound of a stack session (valid nettrace, its
/// stop ignored): stopped there, exit 1 saying so, nothing on stdout.
#[test]
fn a_runtime_streaming_past_the_byte_bound_is_exit_1() {
    let dir = TempDir::new("dsipc-stack-flood").unwrap();
    let stream = common::nettrace_stream((256 << 20) + (16 << 20));
    let _rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::content(Box::leak(stream.into_boxed_slice())))
            .answer(Cmd::StopTracing, Answer::IgnoreStop),
    );
    let r = dsipc_in(dir.path(), &["stack", &me(), "--timeout", "60"]);
    r.assert_no_panic();
    r.assert_exit(1, &["more than 256 MiB"]);
    assert_eq!(r.stdout, "");
}

#[test]
fn a_runtime_going_silent_is_exit_1_within_the_timeout() {
    // The session starts, a little of the stream comes, then nothing (a stop is not
    // answered while the stream thread sleeps).
    let dir = TempDir::new("dsipc-stack-silent").unwrap();
    let _rt = fake(
        &dir,
        Config::new().stream(StreamSpec {
            chunk: 4096,
            pause: Duration::from_secs(4),
            ..StreamSpec::content(capture_prefix(60_000))
        }),
    );
    let r = dsipc_in(dir.path(), &["stack", &me(), "--timeout", "1"]);
    r.assert_no_panic();
    r.assert_exit(1, &["within 1.0 s (--timeout)"]);
    assert!(r.took < Duration::from_secs(3), "took {:?}", r.took);

    // Silent from the start: the session is never answered.
    let dir = TempDir::new("dsipc-stack-hang").unwrap();
    let _rt = fake(
        &dir,
        Config::new().answer(Cmd::CollectTracing2, Answer::Hang),
    );
    let r = dsipc_in(dir.path(), &["stack", &me(), "--timeout", "1"]);
    r.assert_no_panic();
    r.assert_exit(1, &["timed out"]);
    assert!(r.took < Duration::from_secs(3), "took {:?}", r.took);
}

/// Just enough JSON to check the output's structure (no serde_json in this workspace).
mod json {
    #[derive(Debug, Clone, PartialEq)]
    pub enum Value {
        Null,
        Bool(bool),
        Number(f64),
        String(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    impl Value {
        pub fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Object(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
                _ => None,
            }
        }
        pub fn as_str(&self) -> Option<&str> {
            match self {
                Value::String(s) => Some(s),
                _ => None,
            }
        }
        pub fn as_u64(&self) -> Option<u64> {
            match self {
                Value::Number(n) if *n >= 0.0 && n.fract() == 0.0 => Some(*n as u64),
                _ => None,
            }
        }
        pub fn as_array(&self) -> Option<&Vec<Value>> {
            match self {
                Value::Array(a) => Some(a),
                _ => None,
            }
        }
    }

    pub fn parse(s: &str) -> Result<Value, String> {
        let mut p = Parser {
            s: s.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("trailing bytes at {}", p.i));
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl<'a> Parser<'a> {
        fn ws(&mut self) {
            while self.i < self.s.len() && b" \t\r\n".contains(&self.s[self.i]) {
                self.i += 1;
            }
        }
        fn eat(&mut self, c: u8) -> Result<(), String> {
            self.ws();
            if self.s.get(self.i) == Some(&c) {
                self.i += 1;
                Ok(())
            } else {
                Err(format!("expected {:?} at {}", c as char, self.i))
            }
        }
        fn value(&mut self) -> Result<Value, String> {
            self.ws();
            match self.s.get(self.i) {
                Some(b'{') => {
                    self.i += 1;
                    let mut m = Vec::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Ok(Value::Object(m));
                    }
                    loop {
                        self.ws();
                        let k = self.string()?;
                        self.eat(b':')?;
                        let v = self.value()?;
                        m.push((k, v));
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(Value::Object(m));
                            }
                            _ => return Err(format!("bad object at {}", self.i)),
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut a = Vec::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Ok(Value::Array(a));
                    }
                    loop {
                        a.push(self.value()?);
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(Value::Array(a));
                            }
                            _ => return Err(format!("bad array at {}", self.i)),
                        }
                    }
                }
                Some(b'"') => self.string().map(Value::String),
                Some(b't') if self.s[self.i..].starts_with(b"true") => {
                    self.i += 4;
                    Ok(Value::Bool(true))
                }
                Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                    self.i += 5;
                    Ok(Value::Bool(false))
                }
                Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                    self.i += 4;
                    Ok(Value::Null)
                }
                Some(c) if *c == b'-' || c.is_ascii_digit() => {
                    let start = self.i;
                    while self.i < self.s.len() && b"+-.eE0123456789".contains(&self.s[self.i]) {
                        self.i += 1;
                    }
                    std::str::from_utf8(&self.s[start..self.i])
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .map(Value::Number)
                        .ok_or_else(|| format!("bad number at {}", start))
                }
                _ => Err(format!("unexpected byte at {}", self.i)),
            }
        }
        fn string(&mut self) -> Result<String, String> {
            if self.s.get(self.i) != Some(&b'"') {
                return Err(format!("expected a string at {}", self.i));
            }
            self.i += 1;
            let mut out = String::new();
            loop {
                let c = *self.s.get(self.i).ok_or("unterminated string")?;
                self.i += 1;
                match c {
                    b'"' => return Ok(out),
                    b'\\' => {
                        let e = *self.s.get(self.i).ok_or("bad escape")?;
                        self.i += 1;
                        match e {
                            b'"' => out.push('"'),
                            b'\\' => out.push('\\'),
                            b'/' => out.push('/'),
                            b'n' => out.push('\n'),
                            b'r' => out.push('\r'),
                            b't' => out.push('\t'),
                            b'b' => out.push('\u{8}'),
                            b'f' => out.push('\u{c}'),
                            b'u' => {
                                let hex = self.s.get(self.i..self.i + 4).ok_or("bad \\u")?;
                                self.i += 4;
                                let u = u32::from_str_radix(std::str::from_utf8(hex).unwrap(), 16)
                                    .map_err(|e| e.to_string())?;
                                out.push(char::from_u32(u).unwrap_or('\u{fffd}'));
                            }
                            _ => return Err(format!("bad escape at {}", self.i)),
                        }
                    }
                    c if c < 0x20 => return Err(format!("control byte in a string at {}", self.i)),
                    _ => {
                        // Copy the UTF-8 sequence whole.
                        let start = self.i - 1;
                        let mut end = self.i;
                        while end < self.s.len() && (self.s[end] & 0xC0) == 0x80 {
                            end += 1;
                        }
                        out.push_str(
                            std::str::from_utf8(&self.s[start..end]).map_err(|e| e.to_string())?,
                        );
                        self.i = end;
                    }
                }
            }
        }
    }

    #[test]
    fn parses_what_it_must() {
        let v = parse(r#"{"a":[1,-2.5e1,"x\"\u00e9",true,null,{}],"b":[]}"#).unwrap();
        assert_eq!(v.get("a").unwrap().as_array().unwrap().len(), 6);
        assert_eq!(
            v.get("a").unwrap().as_array().unwrap()[2].as_str(),
            Some("x\"é")
        );
        assert!(parse("{\"a\":1,}").is_err());
        assert!(parse("[1] x").is_err());
    }
}
