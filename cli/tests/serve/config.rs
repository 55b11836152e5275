//! dotnet-monitor's configuration: `serve config show` redacts the secrets a settings.json
//! holds in plain text, a wrong value stops serve at start naming its key, and a provider
//! configured in settings.json is the one `egressProvider=` uses, and DefaultProcess's
//! filters from variables pick the default process.

use std::path::PathBuf;
use std::time::Duration;

use dsipc_testkit::{Config, StreamSpec, TempDir};

use super::egress::wait_operation;
use crate::common::dsipc;
use crate::common::serve::{fake, fake_as, Serve};

/// A settings.json in `dir`.
fn settings(dir: &TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("settings.json");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn serve_config_show_redacts_secrets_given_in_plain_text() {
    let dir = TempDir::new("dsipc-config").unwrap();
    let file = settings(
        &dir,
        r#"{
          "urls": "http://localhost:1",
          "Egress": {
            "Properties": {"MonitorBlobAccountKey": "props-secret"},
            "AzureBlobStorage": {"monitorBlob": {"accountUri": "https://a.blob.core.windows.net",
                "containerName": "dotnet-monitor", "accountKeyName": "MonitorBlobAccountKey",
                "sharedAccessSignature": "sas-secret"}},
            "S3Storage": {"monitorS3Blob": {"endpoint": "http://localhost:9000",
                "bucketName": "bkt", "accessKeyId": "minioUser", "secretAccessKey": "s3-secret"}}
          },
          "Authentication": {"MonitorApiKey": {"Subject": "sub", "PublicKey": "jwk-secret"}}
        }"#,
    );
    let file = file.to_str().unwrap();
    let run = dsipc(&[
        "serve",
        "config",
        "show",
        "--configuration-file-path",
        file,
        "--urls",
        "http://127.0.0.1:7",
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    for secret in ["props-secret", "sas-secret", "s3-secret", "jwk-secret"] {
        assert!(
            !run.stdout.contains(secret),
            "{} shown: {}",
            secret,
            run.stdout
        );
        assert!(
            !run.stderr.contains(secret),
            "{} said: {}",
            secret,
            run.stderr
        );
    }
    let doc: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    // The flag wins over the file.
    assert_eq!(doc["urls"], "http://127.0.0.1:7");
    let azure = &doc["Egress"]["AzureBlobStorage"]["monitorBlob"];
    assert_eq!(azure["sharedAccessSignature"], ":REDACTED:");
    assert_eq!(azure["containerName"], "dotnet-monitor");
    assert_eq!(
        doc["Egress"]["Properties"]["MonitorBlobAccountKey"],
        ":REDACTED:"
    );
    assert_eq!(
        doc["Egress"]["S3Storage"]["monitorS3Blob"]["secretAccessKey"],
        ":REDACTED:"
    );
    assert_eq!(
        doc["Authentication"]["MonitorApiKey"]["PublicKey"],
        ":REDACTED:"
    );
    assert_eq!(doc["Metrics"]["Endpoints"], "http://localhost:52325");
    // --level Full shows them, as dotnet-monitor's.
    let full = dsipc(&[
        "serve",
        "config",
        "show",
        "--configuration-file-path",
        file,
        "--level",
        "Full",
    ]);
    assert!(full.stdout.contains("s3-secret"), "{}", full.stdout);
}

#[test]
fn serve_configuration_error_exits_2_naming_the_key() {
    let dir = TempDir::new("dsipc-config").unwrap();
    let file = settings(
        &dir,
        r#"{"Egress": {"S3Storage": {"monitorS3Blob": {"BucketName": "b", "ForcePathStyle": "maybe",
            "SecretAccessKey": "s3-secret"}}}, "Metrics": {"Enabeld": false}}"#,
    );
    let run = dsipc(&[
        "serve",
        "--no-auth",
        "--urls",
        "http://127.0.0.1:0",
        "--configuration-file-path",
        file.to_str().unwrap(),
    ]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!(
            "Egress:S3Storage:monitorS3Blob:ForcePathStyle (from {}): is not true or false",
            file.display()
        )),
        "{}",
        run.stderr
    );
    // One message: the error alone.
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(!run.stderr.contains("s3-secret"), "{}", run.stderr);
    assert!(!run.stderr.contains("API on"), "{}", run.stderr);
}

/// `Egress:FileSystem` from settings.json, and one from a `DotnetMonitor_` variable, are
/// serve's providers: a trace sent to the file's lands in its folder.
#[test]
fn serve_egress_from_settings_json_takes_effect() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let out = TempDir::new("dsipc-config").unwrap();
    let folder = out.path().join("from-settings");
    let file = settings(
        &out,
        &serde_json::json!({"Egress": {"FileSystem": {"fromSettings": {
            "DirectoryPath": folder.to_str().unwrap()}}}})
        .to_string(),
    );
    let _rt = fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec {
            len: None,
            chunk: 4096,
            pause: Duration::from_millis(2),
            end_marker: true,
            content: None,
        }),
    );
    let serve = Serve::start_with(
        dir.path(),
        &[
            "--temp-apikey",
            "--configuration-file-path",
            file.to_str().unwrap(),
        ],
        |cmd| {
            cmd.env(
                "DotnetMonitor_Egress__FileSystem__fromEnv__DirectoryPath",
                out.path().join("from-env"),
            )
            .env("XDG_CONFIG_HOME", out.path());
        },
    );
    // Provider names are case-insensitive, as dotnet-monitor's.
    let a = serve.get("/trace?egressProvider=fromsettings&durationSeconds=-1");
    assert_eq!(a.status, 202, "{}", a.text());
    let location = a.header("location").expect("Location");
    let stop = serve.curl_url(&location, &["-X", "DELETE", "-G", "-d", "stop=true"]);
    assert_eq!(stop.status, 202, "{}", stop.text());
    let done = wait_operation(&serve, &location, &["Succeeded", "Failed"]);
    assert_eq!(done["status"], "Succeeded", "{}", done);
    let landed = PathBuf::from(done["resourceLocation"].as_str().unwrap());
    assert_eq!(landed.parent().unwrap(), folder.as_path());
    assert!(std::fs::metadata(&landed).unwrap().len() > 0);
    // The variable's provider is there too (an unknown one is 400).
    let b = serve.get("/trace?egressProvider=fromEnv&durationSeconds=-1");
    assert_eq!(b.status, 202, "{}", b.text());
    let cancel = serve.curl_url(&b.header("location").unwrap(), &["-X", "DELETE"]);
    assert_eq!(cancel.status, 200, "{}", cancel.text());
}

/// `DefaultProcess:Filters` from `DotnetMonitor_` variables: every filter must match, and
/// `MatchType` is `Exact` unless it says `Contains`.
#[test]
fn serve_default_process_filters_from_the_environment_all_match() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let mut sleepers: Vec<std::process::Child> = (0..2)
        .map(|_| {
            std::process::Command::new("sleep")
                .arg("120")
                .spawn()
                .unwrap()
        })
        .collect();
    let (p1, p2) = (sleepers[0].id(), sleepers[1].id());
    let _a = fake_as(&dir, Config::new().like_net8_0_4(), p1);
    let _b = fake_as(&dir, Config::new().like_net8_0_4(), p2);
    let with_filters = |match_type: &str| {
        let p2 = p2.to_string();
        let match_type = match_type.to_string();
        Serve::start_with(dir.path(), &["--temp-apikey"], move |cmd| {
            cmd.env("DotnetMonitor_DefaultProcess__Filters__0__Key", "ProcessId")
                .env("DotnetMonitor_DefaultProcess__Filters__0__Value", &p2)
                .env(
                    "DotnetMonitor_DefaultProcess__Filters__1__ProcessName",
                    "OTN",
                )
                .env(
                    "DotnetMonitor_DefaultProcess__Filters__1__MatchType",
                    &match_type,
                );
        })
    };
    // "OTN" is in "dotnet" (the fake runtimes' name, case-insensitively): the pid decides.
    let contains = with_filters("Contains");
    assert_eq!(
        contains.get("/process").json()["pid"].as_u64(),
        Some(p2 as u64)
    );
    // Exact: "OTN" is not "dotnet", so no process is the default.
    let exact = with_filters("Exact");
    exact
        .get("/process")
        .assert_problem(400, "Unable to discover a target process.");
    for s in &mut sleepers {
        let _ = s.kill();
        let _ = s.wait();
    }
}

/// `Authentication:MonitorApiKey` with the hash `generatekey` writes: requests carrying
/// the key pass, others are 401; a key flag still wins over it.
#[test]
fn serve_api_key_hash_from_the_configuration_authenticates() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let out = TempDir::new("dsipc-config").unwrap();
    // SHA-256 of "abc" (FIPS 180-2), in dotnet-monitor's ApiKeyHash spelling.
    let file = settings(
        &out,
        r#"{"Authentication": {"MonitorApiKey": {
            "ApiKeyHash": "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
            "ApiKeyHashType": "SHA256"}}}"#,
    );
    let file = file.to_str().unwrap();
    let serve = Serve::start(dir.path(), &["--configuration-file-path", file]);
    assert_eq!(serve.get("/processes").status, 401);
    let ok = serve.get_with("/processes", &["-H", "Authorization: Bearer abc"]);
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(
        serve
            .get_with("/processes", &["-H", "Authorization: Bearer abd"])
            .status,
        401
    );
    // --temp-apikey wins: "abc" no longer opens.
    let temp = Serve::start(
        dir.path(),
        &["--temp-apikey", "--configuration-file-path", file],
    );
    assert_eq!(temp.get("/processes").status, 200);
    assert_eq!(
        temp.get_with("/processes", &["-H", "Authorization: Bearer abc"])
            .status,
        401
    );
}

/// What serve reads and does not act on is said at start, and serve runs: an unknown key,
/// two providers of one name, Kestrel's TLS settings.
#[test]
fn serve_configuration_warnings_are_said_and_serve_runs() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let out = TempDir::new("dsipc-config").unwrap();
    let file = settings(
        &out,
        &serde_json::json!({
            "Metrics": {"Enabeld": false},
            "Kestrel": {"Certificates": {"Default": {"Path": "cert.pfx", "Password": "pw-secret"}}},
            "Egress": {
                "FileSystem": {"files": {"DirectoryPath": out.path().join("files")}},
                "S3Storage": {"Files": {"BucketName": "b", "SecretAccessKey": "s3-secret"}}
            }
        })
        .to_string(),
    );
    let serve = Serve::start(
        dir.path(),
        &[
            "--no-auth",
            "--configuration-file-path",
            file.to_str().unwrap(),
        ],
    );
    let said = serve.live.stderr_lines().join("\n");
    for needle in [
        "Metrics:Enabeld (from ",
        "unknown key",
        "egress provider Files is named twice: Egress:FileSystem:files is the one used",
        "Kestrel is not used",
    ] {
        assert!(said.contains(needle), "{:?} not in {}", needle, said);
    }
    assert!(!said.contains("secret"), "{}", said);
    assert_eq!(serve.get("/processes").status, 200);
}

/// `"DiagnosticPort": "PATH"` (here `DotnetMonitor_DiagnosticPort`) is listen mode on PATH,
/// with `MaxConnections` from the configuration.
#[test]
fn serve_diagnostic_port_from_the_environment_is_listen_mode() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let port = dir.path().join("port.sock");
    let p = port.clone();
    let serve = Serve::start_with(dir.path(), &["--no-auth"], move |cmd| {
        cmd.env("DotnetMonitor_DiagnosticPort", &p)
            .env("DotnetMonitor_DiagnosticPort__MaxConnections", "1");
    });
    let said = serve.live.stderr_lines().join("\n");
    assert!(
        said.contains(&format!(
            "dsipc: diagnostic port {} (listen mode",
            port.display()
        )),
        "{}",
        said
    );
    assert!(port.exists(), "{} not bound", port.display());
}

/// The collection rules of `settings.json` run in `dsipc serve`: a Startup rule's
/// CollectTrace lands in the configured FileSystem provider, `/collectionrules` shows the
/// rule Finished; a rule section of the wrong shape stops serve at start (exit 2, the key
/// named).
#[test]
fn serve_collection_rules_from_settings_json_run() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let out = TempDir::new("dsipc-config").unwrap();
    let files = out.path().join("files");
    let _rt = fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec {
            len: None,
            chunk: 4096,
            pause: Duration::from_millis(2),
            end_marker: true,
            content: None,
        }),
    );
    let file = settings(
        &out,
        &serde_json::json!({
            "Egress": {"FileSystem": {"files": {"DirectoryPath": files}}},
            "CollectionRules": {"AtStartup": {
                "Trigger": {"Type": "Startup"},
                "Actions": [{"Type": "CollectTrace", "Settings": {
                    "Providers": [{"Name": "Microsoft-Windows-DotNETRuntime", "Keywords": "0x1"}],
                    "Duration": "00:00:01",
                    "Egress": "files"
                }}]
            }}
        })
        .to_string(),
    );
    let serve = Serve::start(
        dir.path(),
        &[
            "--no-auth",
            "--configuration-file-path",
            file.to_str().unwrap(),
        ],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rules = serve.get("/collectionrules").json();
        let landed = std::fs::read_dir(&files)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".nettrace"))
            })
            .unwrap_or(false);
        if rules["AtStartup"]["state"] == "Finished" && landed {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no trace landed or rule finished in 60 s: {}",
            rules
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let bad = settings(&out, r#"{"CollectionRules": "not a section"}"#);
    let run = dsipc(&[
        "serve",
        "--no-auth",
        "--urls",
        "http://127.0.0.1:0",
        "--no-metrics",
        "--configuration-file-path",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("CollectionRules"), "{}", run.stderr);
}
