//! Egress operations: started, listed, stopped, cancelled, their files landed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsipc_testkit::{Config, StreamSpec, TempDir};
use serde_json::Value;

use crate::common::serve::{fake, shapes, Serve};

/// Polls `GET /operations/{id}` (bounded) until its status is one of `states`.
pub(crate) fn wait_operation(serve: &Serve, location: &str, states: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let a = serve.curl_url(location, &[]);
        assert!(a.status == 200 || a.status == 201, "{}", a.text());
        let doc = a.json();
        shapes::check(&doc, &shapes::OPERATION_STATUS, "/operations/{id}");
        let status = doc["status"].as_str().unwrap().to_string();
        if states.contains(&status.as_str()) {
            assert_eq!(
                a.status == 201,
                status == "Succeeded",
                "201 only when Succeeded"
            );
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "still {} after 60 s: {}",
            status,
            doc
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Egress to a file-system provider: 202 with the operation's Location; the operation is
/// listed, stopped (`?stop=true`: the trace ends and is kept) or cancelled (nothing is
/// left), and its artifact lands in the provider's folder under dotnet-monitor's name.
#[test]
fn serve_egress_operations_stop_cancel_and_land_files() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let out = TempDir::new("dsipc-egress").unwrap();
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
    let egress = format!("files={}", files.display());
    let serve = Serve::start(dir.path(), &["--temp-apikey", "--egress", &egress]);

    // A trace until stopped, sent to the provider.
    let a = serve.get("/trace?egressProvider=files&durationSeconds=-1&tags=nightly,%20a");
    assert_eq!(a.status, 202, "{}", a.text());
    let location = a.header("location").expect("Location");
    assert!(
        location.starts_with(&format!("http://{}/operations/", serve.api)),
        "{}",
        location
    );
    let id = location.rsplit('/').next().unwrap().to_string();
    let listed = serve.get("/operations").json();
    shapes::check_each(&listed, &shapes::OPERATION_SUMMARY, "/operations");
    let op = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["operationId"] == id.as_str())
        .unwrap_or_else(|| panic!("{} not in {}", id, listed))
        .clone();
    assert_eq!(op["status"], "Running");
    assert_eq!(op["isStoppable"], true);
    assert_eq!(op["egressProviderName"], "files");
    assert_eq!(op["tags"], serde_json::json!(["nightly", "a"]));
    assert!(op["process"]["pid"].as_u64().is_some());
    assert!(
        op.get("resourceLocation").is_none(),
        "a summary has no resourceLocation"
    );
    assert_eq!(
        serve
            .get("/operations?tags=nightly")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        serve
            .get("/operations?tags=other")
            .json()
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let stop = serve.curl_url(&location, &["-X", "DELETE", "-G", "-d", "stop=true"]);
    assert_eq!(stop.status, 202, "{}", stop.text());
    let done = wait_operation(&serve, &location, &["Succeeded", "Failed"]);
    assert_eq!(done["status"], "Succeeded", "{}", done);
    assert_eq!(done["error"], Value::Null);
    let landed = PathBuf::from(done["resourceLocation"].as_str().unwrap());
    assert_eq!(landed.parent().unwrap(), files.as_path());
    assert!(landed
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .ends_with(".nettrace"));
    assert!(std::fs::metadata(&landed).unwrap().len() > 0);
    // Over: neither stopped nor cancelled again.
    serve
        .curl_url(&location, &["-X", "DELETE"])
        .assert_problem(400, "not running");

    // Another, cancelled: nothing left behind in the folder.
    let b = serve.get("/trace?egressProvider=files&durationSeconds=-1");
    assert_eq!(b.status, 202);
    let location_b = b.header("location").unwrap();
    let cancel = serve.curl_url(&location_b, &["-X", "DELETE"]);
    assert_eq!(cancel.status, 200, "{}", cancel.text());
    let cancelled = wait_operation(&serve, &location_b, &["Cancelled", "Failed", "Succeeded"]);
    assert_eq!(cancelled["status"], "Cancelled");
    let names: Vec<String> = std::fs::read_dir(&files)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "only the stopped trace: {:?}", names);

    // Stacks are not stoppable; unknown ids are 400.
    serve
        .get("/operations/00000000-0000-4000-8000-000000000000")
        .assert_problem(400, "was not found");
    serve
        .curl_url(
            &format!("http://{}/operations/nope", serve.api),
            &["-X", "DELETE", "-G", "-d", "stop=true"],
        )
        .assert_problem(400, "was not found");
    serve
        .get("/trace?egressProvider=elsewhere")
        .assert_problem(400, "does not exist");
}
