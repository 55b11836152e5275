//! `dsipc serve` from the tests' side: a running serve on ephemeral loopback ports, curl as
//! the HTTP client, fake runtimes that discovery lists, and dotnet-monitor's JSON shapes.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use dsipc_testkit::{Config, FakeRuntime, TempDir};
use serde_json::Value;

use super::Live;

/// How long serve has to start listening.
pub const START: Duration = Duration::from_secs(20);

/// A running `dsipc serve` on ephemeral loopback ports.
pub struct Serve {
    pub live: Live,
    pub api: String,
    pub metrics: String,
    pub key: Option<String>,
    pub files: TempDir,
}

/// An answer as curl got it.
#[derive(Debug)]
pub struct Answered {
    pub status: u16,
    pub headers: String,
    pub body: Vec<u8>,
    /// curl's exit code (18: the body was cut short).
    pub curl: i32,
}

impl Answered {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{}: not JSON: {:?}", e, self.text()))
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            if k.trim().eq_ignore_ascii_case(name) {
                Some(v.trim().to_string())
            } else {
                None
            }
        })
    }

    /// A problem+json answer with `status` whose detail (or an error) contains `needle`.
    pub fn assert_problem(&self, status: u16, needle: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        assert_eq!(
            self.header("content-type").as_deref(),
            Some("application/problem+json"),
            "{}",
            self.headers
        );
        let doc = self.json();
        shapes::check(&doc, &shapes::VALIDATION_PROBLEM_DETAILS, "problem");
        assert_eq!(doc["status"].as_u64(), Some(status as u64));
        assert!(
            doc.to_string().contains(needle),
            "{:?} not in {}",
            needle,
            doc
        );
    }
}

impl Serve {
    /// `dsipc serve --tmpdir DIR` with `auth` (`--no-auth`, `--api-key-file F`, ...).
    pub fn start(tmpdir: &Path, auth: &[&str]) -> Serve {
        Serve::start_with(tmpdir, auth, |_| {})
    }

    /// [`Serve::start`], the command first given to `configure` (a limit, an environment).
    pub fn start_with(tmpdir: &Path, auth: &[&str], configure: impl FnOnce(&mut Command)) -> Serve {
        let files = TempDir::new("dsipc-serve-test").unwrap();
        let mut cmd = Command::new(super::bin());
        cmd.args([
            "serve",
            "--urls",
            "http://127.0.0.1:0",
            "--metricUrls",
            "http://127.0.0.1:0",
            "--tmpdir",
        ])
        .arg(tmpdir)
        .args(auth);
        configure(&mut cmd);
        let mut live = Live::spawn(cmd);
        let mut key = None;
        if auth.contains(&"--temp-apikey") {
            let line = live.stderr_line("Authorization: Bearer ", START);
            key = Some(line.rsplit(' ').next().unwrap().to_string());
        }
        let api = live.stderr_line("dsipc: API on http://", START);
        let addr = |l: &str| l.rsplit("http://").next().unwrap().to_string();
        // `--no-metrics`: no metrics listener (`/metrics` is then the API's).
        let metrics = if auth.contains(&"--no-metrics") {
            addr(&api)
        } else {
            addr(&live.stderr_line("dsipc: metrics on http://", START))
        };
        Serve {
            api: addr(&api),
            metrics,
            live,
            key,
            files,
        }
    }

    pub fn with_key(tmpdir: &Path) -> Serve {
        Serve::start(tmpdir, &["--temp-apikey"])
    }

    /// curl `args` then `url`, with this server's key unless `args` sets one.
    pub fn curl_url(&self, url: &str, args: &[&str]) -> Answered {
        let head = self.files.path().join("head");
        let body = self.files.path().join("body");
        let _ = std::fs::remove_file(&head);
        let _ = std::fs::remove_file(&body);
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "--max-time", "90", "-D"])
            .arg(&head)
            .arg("-o")
            .arg(&body);
        if let Some(k) = &self.key {
            if !args.iter().any(|a| a.starts_with("Authorization")) {
                cmd.arg("-H").arg(format!("Authorization: Bearer {}", k));
            }
        }
        cmd.args(args).arg(url);
        let out = cmd.output().expect("curl (apt-get install curl)");
        let headers = std::fs::read_to_string(&head).unwrap_or_default();
        let status = headers
            .lines()
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Answered {
            status,
            headers,
            body: std::fs::read(&body).unwrap_or_default(),
            curl: out.status.code().unwrap_or(-1),
        }
    }

    pub fn get(&self, path: &str) -> Answered {
        self.curl_url(&format!("http://{}{}", self.api, path), &[])
    }

    pub fn get_with(&self, path: &str, args: &[&str]) -> Answered {
        self.curl_url(&format!("http://{}{}", self.api, path), args)
    }

    pub fn post(&self, path: &str, body: &str) -> Answered {
        self.curl_url(
            &format!("http://{}{}", self.api, path),
            &[
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                body,
            ],
        )
    }

    pub fn scrape(&self) -> Answered {
        self.curl_url(
            &format!("http://{}/metrics", self.metrics),
            &["-H", "Authorization: none"],
        )
    }
}

/// A fake runtime listed as this test process (its socket named with our pid and our
/// start-time key, as discovery wants).
pub fn fake(dir: &TempDir, config: Config) -> FakeRuntime {
    let me = std::process::id();
    fake_as(dir, config, me)
}

/// A fake runtime listed as process `pid` (a live process of ours).
pub fn fake_as(dir: &TempDir, config: Config, pid: u32) -> FakeRuntime {
    config
        .pid(u64::from(pid))
        .key(dsipc_std::unix::start_key(pid).expect("start key"))
        .listen_in(dir.path())
        .start()
        .expect("fake runtime")
}

/// dotnet-monitor's JSON shapes (its `openapi.json` and `definitions.md`), written down
/// here: each answer is checked field by field (names, types, required members, and no
/// member the schema does not have where it says `additionalProperties: false`).
pub mod shapes {
    use serde_json::Value;

    /// A member's type.
    pub enum T {
        Int,
        Num,
        Bool,
        Str,
        /// A string or null.
        NStr,
        Uuid,
        DateTime,
        Enum(&'static [&'static str]),
        Obj(&'static Shape),
        /// An object or null.
        NObj(&'static Shape),
        Arr(&'static T),
        /// An array or null.
        NArr(&'static T),
        /// An object whose every member is of this type.
        Map(&'static T),
    }

    /// An object: (member, type, required); `open`: other members allowed.
    pub struct Shape {
        pub fields: &'static [(&'static str, T, bool)],
        pub open: bool,
    }

    pub static PROCESS_IDENTIFIER: Shape = Shape {
        fields: &[
            ("pid", T::Int, true),
            ("uid", T::Uuid, true),
            ("name", T::NStr, false),
            ("isDefault", T::Bool, true),
        ],
        open: false,
    };
    pub static PROCESS_INFO: Shape = Shape {
        fields: &[
            ("pid", T::Int, true),
            ("uid", T::Uuid, true),
            ("name", T::NStr, false),
            ("commandLine", T::NStr, false),
            ("operatingSystem", T::NStr, false),
            ("processArchitecture", T::NStr, false),
            ("managedEntryPointAssemblyName", T::NStr, false),
        ],
        open: false,
    };
    static CAPABILITY: Shape = Shape {
        fields: &[("name", T::Str, true), ("enabled", T::Bool, true)],
        open: false,
    };
    pub static DOTNET_MONITOR_INFO: Shape = Shape {
        fields: &[
            ("version", T::NStr, false),
            ("runtimeVersion", T::NStr, false),
            ("diagnosticPortMode", T::Enum(&["Connect", "Listen"]), false),
            ("diagnosticPortName", T::NStr, false),
            ("capabilities", T::NArr(&T::Obj(&CAPABILITY)), true),
        ],
        open: false,
    };
    pub static VALIDATION_PROBLEM_DETAILS: Shape = Shape {
        fields: &[
            ("type", T::NStr, false),
            ("title", T::NStr, false),
            ("status", T::Int, false),
            ("detail", T::NStr, false),
            ("instance", T::NStr, false),
            ("errors", T::Map(&T::Arr(&T::Str)), false),
        ],
        open: true,
    };
    static OPERATION_PROCESS_INFO: Shape = Shape {
        fields: &[
            ("pid", T::Int, false),
            ("uid", T::Uuid, false),
            ("name", T::NStr, false),
        ],
        open: false,
    };
    static STATES: &[&str] = &[
        "Starting",
        "Running",
        "Succeeded",
        "Failed",
        "Cancelled",
        "Stopping",
    ];
    pub static OPERATION_SUMMARY: Shape = Shape {
        fields: &[
            ("operationId", T::Uuid, true),
            ("createdDateTime", T::DateTime, true),
            ("status", T::Enum(STATES), true),
            ("process", T::NObj(&OPERATION_PROCESS_INFO), false),
            ("egressProviderName", T::NStr, false),
            ("isStoppable", T::Bool, false),
            ("tags", T::NArr(&T::Str), false),
        ],
        open: false,
    };
    static OPERATION_ERROR: Shape = Shape {
        fields: &[("code", T::NStr, false), ("message", T::NStr, false)],
        open: false,
    };
    pub static OPERATION_STATUS: Shape = Shape {
        fields: &[
            ("resourceLocation", T::NStr, false),
            ("error", T::NObj(&OPERATION_ERROR), false),
            ("operationId", T::Uuid, true),
            ("createdDateTime", T::DateTime, true),
            ("status", T::Enum(STATES), true),
            ("process", T::NObj(&OPERATION_PROCESS_INFO), false),
            ("egressProviderName", T::NStr, false),
            ("isStoppable", T::Bool, false),
            ("tags", T::NArr(&T::Str), false),
        ],
        open: false,
    };
    static FRAME: Shape = Shape {
        fields: &[
            ("methodName", T::Str, true),
            ("methodToken", T::Int, true),
            ("parameterTypes", T::Arr(&T::Str), true),
            ("typeName", T::Str, true),
            ("moduleName", T::Str, true),
            ("moduleVersionId", T::Uuid, true),
        ],
        open: false,
    };
    static STACK: Shape = Shape {
        fields: &[
            ("threadId", T::Int, true),
            ("threadName", T::NStr, false),
            ("frames", T::Arr(&T::Obj(&FRAME)), true),
        ],
        open: false,
    };
    pub static CALL_STACK_RESULT: Shape = Shape {
        fields: &[("stacks", T::Arr(&T::Obj(&STACK)), true)],
        open: false,
    };
    pub static METRIC: Shape = Shape {
        fields: &[
            ("timestamp", T::DateTime, true),
            ("provider", T::Str, true),
            ("name", T::Str, true),
            ("displayName", T::Str, true),
            ("unit", T::NStr, true),
            ("counterType", T::Enum(&["Rate", "Metric"]), true),
            ("tags", T::NStr, false),
            ("value", T::Num, true),
        ],
        open: false,
    };

    fn is_uuid(s: &str) -> bool {
        let b = s.as_bytes();
        b.len() == 36
            && b.iter().enumerate().all(|(i, &c)| match i {
                8 | 13 | 18 | 23 => c == b'-',
                _ => c.is_ascii_hexdigit(),
            })
    }

    /// `2021-07-21T06:21:15.315861Z` or with an offset (`+00:00`).
    fn is_date_time(s: &str) -> bool {
        let b = s.as_bytes();
        b.len() >= 20
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
            && b[13] == b':'
            && b[16] == b':'
            && (s.ends_with('Z') || s[19..].contains('+') || s[19..].contains('-'))
    }

    fn check_type(v: &Value, t: &T, at: &str) {
        let ok = match t {
            T::Int => v.is_i64() || v.is_u64(),
            T::Num => v.is_number(),
            T::Bool => v.is_boolean(),
            T::Str => v.is_string(),
            T::NStr => v.is_string() || v.is_null(),
            T::Uuid => v.as_str().map_or(false, is_uuid),
            T::DateTime => v.as_str().map_or(false, is_date_time),
            T::Enum(names) => v.as_str().map_or(false, |s| names.contains(&s)),
            T::Obj(shape) => {
                check(v, shape, at);
                true
            }
            T::NObj(shape) => {
                if !v.is_null() {
                    check(v, shape, at);
                }
                true
            }
            T::Arr(item) | T::NArr(item) => match v.as_array() {
                Some(a) => {
                    for (i, x) in a.iter().enumerate() {
                        check_type(x, item, &format!("{}[{}]", at, i));
                    }
                    true
                }
                None => matches!(t, T::NArr(_)) && v.is_null(),
            },
            T::Map(item) => match v.as_object() {
                Some(o) => {
                    for (k, x) in o {
                        check_type(x, item, &format!("{}.{}", at, k));
                    }
                    true
                }
                None => false,
            },
        };
        assert!(ok, "{}: {} is not of its schema type", at, v);
    }

    /// Checks `v` against `shape`.
    pub fn check(v: &Value, shape: &Shape, at: &str) {
        let o = v
            .as_object()
            .unwrap_or_else(|| panic!("{}: not an object: {}", at, v));
        for (name, t, required) in shape.fields {
            match o.get(*name) {
                Some(x) => check_type(x, t, &format!("{}.{}", at, name)),
                None => assert!(!required, "{}: no {} in {}", at, name, v),
            }
        }
        if !shape.open {
            for k in o.keys() {
                assert!(
                    shape.fields.iter().any(|(n, _, _)| n == k),
                    "{}: {} is not in the schema: {}",
                    at,
                    k,
                    v
                );
            }
        }
    }

    /// Checks every element of the array `v`.
    pub fn check_each(v: &Value, shape: &Shape, at: &str) {
        for (i, x) in v
            .as_array()
            .unwrap_or_else(|| panic!("{}: not an array: {}", at, v))
            .iter()
            .enumerate()
        {
            check(x, shape, &format!("{}[{}]", at, i));
        }
    }
}
