//! ARCHITECTURE.md is a map of the tree, and the tree keeps its per-file
//! detail: in each crate's section (`## crates/NAME`, `## xtask`), every
//! folder under `src/` that holds source files is named (`folder/` or
//! `src/folder/`, nested folders in full: `bench/workloads/`), every `.rs`
//! name and folder the section gives exists in that crate, and every
//! source file under `src/` opens with a `//!` comment saying what it
//! holds. A name may start with the crate's path (`xtask/src/bench/`).

use std::collections::BTreeSet;
use std::path::Path;

/// The backticked names of a section that look like files or folders.
fn named(section: &str, krate: &str) -> BTreeSet<String> {
    let prefix = format!("{krate}/");
    section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|name| name.ends_with(".rs") || (name.ends_with('/') && !name.contains(' ')))
        .map(|name| {
            let name = name.strip_prefix(prefix.as_str()).unwrap_or(name);
            name.strip_prefix("src/").unwrap_or(name).to_owned()
        })
        .collect()
}

/// The crate's files under `dir`, relative to it, `/`-separated.
fn files_under(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for path in entries.filter_map(|entry| entry.ok().map(|entry| entry.path())) {
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let relative = path.strip_prefix(dir).unwrap_or(&path);
                files.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    files.sort();
    files
}

/// Every mismatch between one crate's section and its files.
fn mismatches(krate: &str, crate_dir: &Path, section: &str) -> Vec<String> {
    let names = named(section, krate);
    let mut found = Vec::new();
    let sources = files_under(&crate_dir.join("src"));
    let folders: BTreeSet<String> = sources
        .iter()
        .filter_map(|file| {
            file.rsplit_once('/')
                .map(|(folder, _)| format!("{folder}/"))
        })
        .collect();
    for folder in folders.iter().filter(|folder| !names.contains(*folder)) {
        found.push(format!(
            "{krate}: folder src/{folder} is not named in ARCHITECTURE.md"
        ));
    }
    for file in &sources {
        let text = std::fs::read_to_string(crate_dir.join("src").join(file)).unwrap_or_default();
        if !text.starts_with("//!") {
            found.push(format!(
                "{krate}: src/{file} does not open with a `//!` comment saying what it holds"
            ));
        }
    }
    let everything: Vec<String> = ["src", "tests", "examples", "benches"]
        .iter()
        .flat_map(|dir| {
            files_under(&crate_dir.join(dir))
                .into_iter()
                .map(move |file| format!("{dir}/{file}"))
        })
        .collect();
    for name in names.iter().filter(|name| name.ends_with(".rs")) {
        let exists = everything.iter().any(|file| {
            file == name
                || file.strip_prefix("src/") == Some(name.as_str())
                || file.ends_with(&format!("/{name}"))
        });
        if !exists {
            found.push(format!(
                "{krate}: ARCHITECTURE.md names {name}, which is no file of the crate"
            ));
        }
    }
    for name in names.iter().filter(|name| name.ends_with('/')) {
        if !crate_dir.join("src").join(name).is_dir() && !crate_dir.join(name).is_dir() {
            found.push(format!(
                "{krate}: ARCHITECTURE.md names folder {name}, which does not exist"
            ));
        }
    }
    found
}

/// Every mismatch in the workspace: each `## crates/NAME` and `## xtask`
/// section against its crate.
fn check(workspace: &Path, architecture: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut sections = 0;
    for section in architecture.split("\n## ").skip(1) {
        let (heading, body) = section.split_once('\n').unwrap_or((section, ""));
        let heading = heading.trim();
        let dir = workspace.join(heading);
        if !(heading.starts_with("crates/") || heading == "xtask") {
            continue;
        }
        if !dir.join("Cargo.toml").is_file() {
            found.push(format!(
                "ARCHITECTURE.md has a section for {heading}, which is no crate"
            ));
            continue;
        }
        sections += 1;
        found.extend(mismatches(heading, &dir, body));
    }
    if sections == 0 {
        found.push("ARCHITECTURE.md has no crate sections".to_owned());
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architecture_md_maps_every_folder_and_every_file_says_what_it_holds() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let architecture = std::fs::read_to_string(workspace.join("ARCHITECTURE.md")).unwrap();
        let mut crates: Vec<String> = std::fs::read_dir(workspace.join("crates"))
            .unwrap()
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.path().join("Cargo.toml").is_file())
            .map(|entry| format!("crates/{}", entry.file_name().to_string_lossy()))
            .collect();
        crates.push("xtask".to_owned());
        let mut found = check(&workspace, &architecture);
        for krate in crates {
            if !architecture.contains(&format!("\n## {krate}\n")) {
                found.push(format!("ARCHITECTURE.md has no section \"## {krate}\""));
            }
        }
        assert!(
            found.is_empty(),
            "ARCHITECTURE.md drifted from the tree:\n  {}",
            found.join("\n  ")
        );
    }

    #[test]
    fn names_are_backticked_files_and_folders() {
        assert_eq!(
            named(
                "`cycle.rs` (x), `run_queue/slot_claim.rs`, `xtask/src/bench/`, `src/bin/a.rs`, \
                 `a b/`, `tick`",
                "xtask"
            ),
            BTreeSet::from([
                "bench/".to_owned(),
                "bin/a.rs".to_owned(),
                "cycle.rs".to_owned(),
                "run_queue/slot_claim.rs".to_owned(),
            ])
        );
    }
}
