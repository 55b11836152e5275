//! What serve refuses, and how: authentication, bad parameters, no default process, bad
//! arguments.

use std::process::Command;
use std::time::Duration;

use dsipc_testkit::{Config, TempDir};

use crate::common;
use crate::common::serve::{fake, fake_as, Serve, START};

/// No key, a wrong key, the right key; no key configured; --no-auth.
#[test]
fn serve_authentication_none_wrong_and_right_key() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let _rt = fake(&dir, Config::new().like_net8_0_4());
    let keyfile = dir.path().join("key.json");
    let g = common::dsipc(&["serve", "generatekey", "-o", keyfile.to_str().unwrap()]);
    assert_eq!(g.code, Some(0), "{}", g.stderr);
    let token = g
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Authorization: Bearer "))
        .expect("the header line")
        .to_string();
    let stored = std::fs::read_to_string(&keyfile).unwrap();
    assert!(!stored.contains(&token), "the key file holds the key");
    assert!(
        stored.contains("\"ApiKeyHashType\": \"SHA256\""),
        "{}",
        stored
    );
    // An existing file is kept without --force.
    let again = common::dsipc(&["serve", "generatekey", "-o", keyfile.to_str().unwrap()]);
    assert_eq!(again.code, Some(1), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(&keyfile).unwrap(), stored);

    let mut serve = Serve::start(dir.path(), &["--api-key-file", keyfile.to_str().unwrap()]);
    let none = serve.get("/processes");
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate").as_deref(), Some("Bearer"));
    assert_eq!(
        serve
            .get_with("/processes", &["-H", "Authorization: Bearer nope"])
            .status,
        401
    );
    assert_eq!(
        serve
            .get_with(
                "/processes",
                &["-H", &format!("Authorization: Basic {}", token)]
            )
            .status,
        401
    );
    serve.key = Some(token.clone());
    assert_eq!(serve.get("/processes").status, 200);
    // /metrics on the metrics listener needs no key.
    assert_eq!(serve.scrape().status, 200);

    // No key configured: every API request is 401, and stderr says so.
    let mut bare = Serve::start(dir.path(), &[]);
    bare.live.stderr_line("no API key is configured", START);
    assert_eq!(bare.get("/processes").status, 401);
    bare.key = Some(token);
    assert_eq!(bare.get("/processes").status, 401);

    // --no-auth: open, with dotnet-monitor's warning.
    let mut open = Serve::start(dir.path(), &["--no-auth"]);
    assert_eq!(open.get("/processes").status, 200);
    let run = open.live.interrupt(Duration::from_secs(20));
    assert!(
        run.stderr
            .contains("WARNING: Authentication has been disabled"),
        "{}",
        run.stderr
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

/// Bad parameters are 400 problem+json naming them; unknown processes too; unknown routes
/// 404; routes not offered yet 501.
#[test]
fn serve_bad_parameters_are_problem_details() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let _rt = fake(&dir, Config::new().like_net8_0_4());
    let serve = Serve::with_key(dir.path());
    for (path, needle) in [
        ("/process?pid=abc", "\"pid\""),
        ("/process?pid=-3", "\"pid\""),
        ("/process?uid=not-a-guid", "\"uid\""),
        (
            "/process?pid=2147483646",
            "Unable to discover a target process.",
        ),
        (
            "/process?name=nosuchname",
            "Unable to discover a target process.",
        ),
        ("/trace?durationSeconds=-2", "durationSeconds"),
        ("/trace?durationSeconds=99999999999", "durationSeconds"),
        ("/trace?profile=Cpu,Loud", "profile"),
        ("/trace?egressProvider=nowhere", "egressProvider"),
        ("/dump?type=Huge", "\"type\""),
        ("/process?pid=%zz", "percent escape"),
    ] {
        serve.get(path).assert_problem(400, needle);
    }
    for (body, needle) in [
        ("not json", "not JSON"),
        ("{}", "Providers field is required"),
        (
            r#"{"providers":[{"name":"x","keywords":"0xZZ"}]}"#,
            "Keywords",
        ),
        (
            r#"{"providers":[{"name":"x"}],"bufferSizeInMB":4096}"#,
            "BufferSizeInMB",
        ),
    ] {
        serve.post("/trace", body).assert_problem(400, needle);
    }
    let big = "x".repeat(100 * 1024);
    serve
        .post("/trace", &big)
        .assert_problem(400, "larger than");
    assert_eq!(serve.get("/nope").status, 404);
    serve
        .get("/parameters")
        .assert_problem(501, "not implemented");
}

/// Several runtimes and no pid: 400 with dotnet-monitor's words; /processes has no default.
#[test]
fn serve_without_a_default_process_says_so() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let mut sleepers: Vec<std::process::Child> = (0..2)
        .map(|_| Command::new("sleep").arg("120").spawn().unwrap())
        .collect();
    let (p1, p2) = (sleepers[0].id(), sleepers[1].id());
    let a = fake_as(&dir, Config::new().like_net8_0_4(), p1);
    let _b = fake_as(&dir, Config::new().like_net8_0_4(), p2);
    let serve = Serve::with_key(dir.path());
    let list = serve.get("/processes").json();
    assert_eq!(list.as_array().unwrap().len(), 2, "{}", list);
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["isDefault"] == false));
    serve
        .get("/process")
        .assert_problem(400, "Unable to select a single target process because multiple target processes have been discovered.");
    let one = serve.get(&format!("/process?pid={}", p1)).json();
    assert_eq!(
        one["uid"].as_str(),
        Some(a.identity().cookie.to_string().as_str())
    );
    // dotnet-monitor's DefaultProcess filter picks one.
    let filter = format!("ProcessId={}", p2);
    let chosen = Serve::start(dir.path(), &["--temp-apikey", "--default-process", &filter]);
    assert_eq!(
        chosen.get("/process").json()["pid"].as_u64(),
        Some(p2 as u64)
    );
    let list = chosen.get("/processes").json();
    for p in list.as_array().unwrap() {
        assert_eq!(
            p["isDefault"] == true,
            p["pid"].as_u64() == Some(p2 as u64),
            "{}",
            list
        );
    }
    let r = common::dsipc(&["serve", "--default-process", "Color=blue"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    for s in &mut sleepers {
        let _ = s.kill();
        let _ = s.wait();
    }
}

/// Usage errors: https (no TLS here), a bad URL, two key options.
#[test]
fn serve_bad_arguments_are_usage_errors() {
    for args in [
        &["serve", "--urls", "https://localhost:52323"][..],
        &["serve", "--urls", "localhost:1"],
        &["serve", "--urls", "http://example.com:1"],
        &["serve", "--no-auth", "--temp-apikey"],
        &["serve", "extra"],
    ] {
        let r = common::dsipc(args);
        assert_eq!(r.code, Some(2), "{:?}: {}", args, r.stderr);
    }
    let r = common::dsipc(&["serve", "--help"]);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("dsipc serve generatekey"));
    let bad_key = TempDir::new("dsipc-sv").unwrap();
    let f = bad_key.path().join("k");
    std::fs::write(&f, "{\"MonitorApiKey\":{}}").unwrap();
    let r = common::dsipc(&["serve", "--api-key-file", f.to_str().unwrap()]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("ApiKeyHash"), "{}", r.stderr);
}
