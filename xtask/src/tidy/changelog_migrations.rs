//! CHANGELOG.md's "Migrations" section has one entry per migration file,
//! in order: `- **VN** \`VN__name\`` for every `migrations/VN__name.sql`,
//! and none for a file that does not exist. A new migration without its
//! upgrade note fails here.

use std::path::Path;

/// The `VN__name` of every entry of the section, in order.
fn entries(changelog: &str) -> Result<Vec<String>, String> {
    let section = changelog
        .split("\n### Migrations\n")
        .nth(1)
        .ok_or("CHANGELOG.md has no \"### Migrations\" section")?;
    let section = section.split("\n### ").next().unwrap_or(section);
    let mut found = Vec::new();
    for line in section.lines().filter(|line| line.starts_with("- **V")) {
        let name = line
            .split('`')
            .nth(1)
            .ok_or_else(|| format!("entry without a `VN__name`: {line:?}"))?;
        let version = line
            .trim_start_matches("- **")
            .split("**")
            .next()
            .unwrap_or_default();
        if !name.starts_with(&format!("{version}__")) {
            return Err(format!("entry {version} names {name}"));
        }
        found.push(name.to_owned());
    }
    Ok(found)
}

/// The `VN__name` of every migration file, by version.
fn migrations(dir: &Path) -> Vec<String> {
    let mut files: Vec<(u32, String)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".sql")?.to_owned();
            let version = stem.strip_prefix('V')?.split("__").next()?.parse().ok()?;
            Some((version, stem))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, stem)| stem).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_migration_has_its_changelog_entry_in_order() {
        let root = crate::workspace::root();
        let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
        assert_eq!(
            entries(&changelog).unwrap(),
            migrations(&root.join("migrations"))
        );
    }

    #[test]
    fn a_missing_or_misnamed_entry_is_seen() {
        let changelog = "x\n### Migrations\n\n- **V1** `V1__a`: one.\n- **V2** `V3__b`: two.\n\n### Added\n- **V9** `V9__c`\n";
        assert_eq!(entries(changelog), Err("entry V2 names V3__b".to_owned()));
        let changelog =
            "x\n### Migrations\n\n- **V1** `V1__a`: one.\n\n### Added\n- **V9** `V9__c`\n";
        assert_eq!(entries(changelog), Ok(vec!["V1__a".to_owned()]));
        assert_eq!(
            entries("no section"),
            Err("CHANGELOG.md has no \"### Migrations\" section".to_owned())
        );
    }
}
