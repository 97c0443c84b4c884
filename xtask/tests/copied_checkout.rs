//! `cargo xtask pg ...` run in a copy of the checkout works on the copy:
//! its `target/statek-pg`, never the `target/` of the checkout the xtask
//! binary was compiled in.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn pg_status_in_a_copy_uses_the_copys_target_dir() {
    let copy: PathBuf =
        std::env::temp_dir().join(format!("statek-xtask-copy-{}", std::process::id()));
    let _ = fs::remove_dir_all(&copy);
    fs::create_dir_all(copy.join("xtask/src")).unwrap();
    fs::write(
        copy.join("Cargo.toml"),
        "[workspace]\nmembers = [\"xtask\"]\n",
    )
    .unwrap();
    fs::write(
        copy.join("xtask/Cargo.toml"),
        "[package]\nname = \"xtask\"\nversion = \"0.0.0\"\n",
    )
    .unwrap();

    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["pg", "status", "--version", "17"])
        .current_dir(copy.join("xtask/src"))
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let store_created = copy.join("target/statek-pg").is_dir();
    let _ = fs::remove_dir_all(&copy);

    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert_eq!(
        stdout, "PostgreSQL 17: not started (run `cargo xtask pg start --version 17`)\n",
        "stderr:\n{stderr}"
    );
    assert!(store_created, "the copy's target/statek-pg was not used");
}
