//! Replays the seed corpus (`corpus-seeds/<target>/`) and the regression inputs
//! (`regressions/<target>/`, crashes the fuzzers found) through the same harness functions
//! the fuzz targets call, without libFuzzer: `cargo test` in `fuzz/`.

use std::path::Path;

fn replay(dir: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut n = 0;
    for (name, run) in dsipc_fuzz::TARGETS {
        let d = root.join(name);
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(_) => continue,
        };
        let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap();
            eprintln!("{}: {}", name, f.display());
            run(&data);
            n += 1;
        }
    }
    n
}

#[test]
fn seed_corpus() {
    let n = replay("corpus-seeds");
    assert!(n > 0, "no seeds found");
}

#[test]
fn regressions() {
    replay("regressions");
}

#[test]
fn every_target_has_seeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus-seeds");
    for (name, _) in dsipc_fuzz::TARGETS {
        let n = std::fs::read_dir(root.join(name))
            .map(|d| d.count())
            .unwrap_or(0);
        assert!(n > 0, "no seeds for {}", name);
    }
}

/// Every fuzz target binary calls a harness function of the same name.
#[test]
fn targets_match_binaries() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz_targets");
    let mut bins: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    bins.sort();
    let mut names: Vec<String> = dsipc_fuzz::TARGETS
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    names.sort();
    assert_eq!(bins, names);
    for (name, _) in dsipc_fuzz::TARGETS {
        let src = std::fs::read_to_string(dir.join(format!("{}.rs", name))).unwrap();
        assert!(
            src.contains(&format!("dsipc_fuzz::{}(data)", name)),
            "{}.rs does not call dsipc_fuzz::{}",
            name,
            name
        );
    }
}
