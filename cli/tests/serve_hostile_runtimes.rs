//! `dsipc serve` facing a hostile runtime: the fake runtime (tests/testkit) answering as a
//! real runtime never would, to take serve where it must not go (files it must not read).
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::serve::{fake, Serve};
use common::{names_in, nettrace_stream, vm_hwm_kib};
use dsipc::Command as Cmd;
use dsipc_testkit::{Answer, Config, DumpPlant, FakeRuntime, StreamSpec, TempDir};

/// serve's bound on what `/stacks` reads (`collect::MAX_SESSION_BYTES`).
const MAX_STACKS_BYTES: usize = 256 << 20;
/// The most serve may hold resident through a hostile case.
const MAX_RSS_KIB: u64 = 64 * 1024;

/// Every GenerateCoreDump version answered with `plant`.
fn answer_dumps(rt: &FakeRuntime, plant: &DumpPlant) {
    for c in [
        Cmd::GenerateCoreDump,
        Cmd::GenerateCoreDump2,
        Cmd::GenerateCoreDump3,
    ] {
        rt.set_answer(c, Answer::Dump(plant.clone()));
    }
}

/// A file holding `text`, with `mode`, owned by `uid`.
fn file(path: &Path, text: &str, mode: u32, uid: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; -1 leaves the group as it is.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), uid, u32::MAX) }, 0);
}

/// `/dump` with a shared `--dump-temp-folder` (mode 1777): a runtime that answers the dump
/// command by putting at the path serve named a symbolic link to a 0600 file, a hard link
/// to it, or a file of another user's, gets a 400 naming why; the file's bytes are never
/// sent, and what the runtime planted stays (serve deletes only a dump it accepted). A
/// regular file of the runtime's user is served, then deleted.
#[test]
fn serve_dump_refuses_links_and_foreign_files_planted_at_the_dump_path() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let shared = TempDir::new("dsipc-sv-dumps").unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let private = TempDir::new("dsipc-sv-secret").unwrap();
    let secret = private.path().join("secret");
    file(&secret, "TOP SECRET", 0o600, 0);
    let rt = fake(&dir, Config::new());
    let serve = Serve::start(
        dir.path(),
        &[
            "--temp-apikey",
            "--dump-temp-folder",
            shared.path().to_str().unwrap(),
        ],
    );

    let foreign = private.path().join("foreign");
    file(&foreign, "NOT YOURS", 0o644, 65534);
    let cases = [
        (DumpPlant::Symlink(secret.clone()), "is a symbolic link"),
        (DumpPlant::HardLink(secret.clone()), "has 2 links"),
        (DumpPlant::Rename(foreign), "owned by uid 65534"),
    ];
    for (n, (plant, why)) in cases.iter().enumerate() {
        answer_dumps(&rt, plant);
        let d = serve.get("/dump");
        d.assert_problem(400, why);
        assert!(!d.text().contains("SECRET") && !d.text().contains("NOT YOURS"));
        // Left where the runtime put it.
        assert_eq!(names_in(shared.path()).len(), n + 1, "{:?}", plant);
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "TOP SECRET");

    // The runtime's own dump (its user is ours): sent, then gone from the folder.
    let own = private.path().join("own");
    // SAFETY: geteuid has no preconditions.
    file(&own, "ELF DUMP", 0o600, unsafe { libc::geteuid() });
    answer_dumps(&rt, &DumpPlant::Rename(own));
    let d = serve.get("/dump");
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(d.text(), "ELF DUMP");
    assert_eq!(names_in(shared.path()).len(), 3);
}

/// `/stacks` from a runtime that streams on past serve's 256 MiB bound (valid nettrace, a
/// stop ignored): the session is stopped there and the answer is a 400 saying so (as a
/// failed session's), said on stderr; serve stays under 64 MiB and `/info` answers.
#[test]
fn serve_stacks_stops_a_runtime_streaming_past_the_byte_bound() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let stream: &'static [u8] =
        Box::leak(nettrace_stream(MAX_STACKS_BYTES + (16 << 20)).into_boxed_slice());
    let _rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::content(stream))
            .answer(Cmd::StopTracing, Answer::IgnoreStop),
    );
    let mut serve = Serve::with_key(dir.path());
    let a = serve.get("/stacks");
    a.assert_problem(400, "more than 256 MiB");
    serve
        .live
        .stderr_line("more than 256 MiB", common::serve::START);
    let kib = vm_hwm_kib(serve.live.child.id());
    assert!(kib < MAX_RSS_KIB, "serve's peak RSS is {} KiB", kib);
    assert_eq!(serve.get("/info").status, 200);
}
