//! docs/design.md against the code, for the facts it enumerates that the
//! code can list: the `statek` binary's commands (its crate map names them,
//! in clap's order), the tenant outcomes of a tick (in declaration order),
//! the slot outcome classes with their letters (the table of section 5),
//! the policy algorithms (section 3) and the SQLSTATEs `is_retryable()`
//! treats as transient.

use clap::CommandFactory as _;

/// The commands the crate map of docs/design.md names for statek-cli, in
/// its order (the list before "; later ...").
fn design_commands(design: &str) -> Result<Vec<String>, String> {
    let start = design
        .find("the `statek` binary for operators (")
        .ok_or("docs/design.md does not describe the `statek` binary's commands")?;
    let rest = &design[start + "the `statek` binary for operators (".len()..];
    let list = rest
        .split([';', ')'])
        .next()
        .ok_or("the command list is not closed")?;
    Ok(list
        .split(',')
        .map(|name| name.split_whitespace().collect::<String>())
        .filter(|name| !name.is_empty())
        .collect())
}

/// The text between `opening` and the next `)` of `design`.
fn list_after<'d>(design: &'d str, opening: &str, what: &str) -> Result<&'d str, String> {
    let start = design
        .find(opening)
        .ok_or_else(|| format!("docs/design.md does not list {what}"))?;
    let rest = &design[start + opening.len()..];
    rest.split(')')
        .next()
        .ok_or_else(|| format!("the list of {what} is not closed"))
}

/// The tenant outcomes docs/design.md names for a tick (`Executed`, ...),
/// as labels (`executed`, ...).
fn design_outcome_labels(design: &str) -> Result<Vec<String>, String> {
    let list = list_after(design, "and the tenant outcome\n  (", "the tenant outcomes")?;
    Ok(list
        .split(',')
        .map(|name| name.trim().trim_matches('`'))
        .filter(|name| !name.is_empty())
        .map(|name| {
            let mut label = String::new();
            for (index, c) in name.chars().enumerate() {
                if c.is_ascii_uppercase() && index > 0 {
                    label.push('_');
                }
                label.push(c.to_ascii_lowercase());
            }
            label
        })
        .collect())
}

/// The slot outcome classes of docs/design.md's table after
/// "**Slot outcome classes**": `(letter, label)` per row, in its order.
fn design_slot_classes(design: &str) -> Result<Vec<(char, String)>, String> {
    let start = design
        .find("**Slot outcome classes**")
        .ok_or("docs/design.md does not list the slot outcome classes")?;
    let rows: Vec<(char, String)> = design[start..]
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let letter = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let label = cells.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
            let mut chars = letter.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Some((c, label.to_owned())),
                _ => None,
            }
        })
        .collect();
    if rows.is_empty() {
        return Err("docs/design.md's slot outcome table has no rows".to_owned());
    }
    Ok(rows)
}

/// The algorithm names section 3 of docs/design.md gives (backticked, of
/// the form `name-vN`), each once, in the order they first appear.
fn design_algorithms(design: &str) -> Result<Vec<String>, String> {
    let start = design
        .find("## 3. Policy")
        .ok_or("docs/design.md has no section \"## 3. Policy\"")?;
    let section = &design[start..];
    let section = &section[..section[1..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 1)];
    let mut names: Vec<String> = Vec::new();
    for token in section.split('`').skip(1).step_by(2) {
        let is_name = token.rsplit_once("-v").is_some_and(|(stem, version)| {
            !stem.is_empty()
                && stem.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                && !version.is_empty()
                && version.chars().all(|c| c.is_ascii_digit())
        });
        if is_name && !names.iter().any(|n| n == token) {
            names.push(token.to_owned());
        }
    }
    Ok(names)
}

/// Whether docs/design.md's list of transient SQLSTATEs holds `code`: its
/// items are a class (`08xxx except 08P01`), a range (`57P01-57P03`) or
/// one code; words without a code (`a server in recovery`) are skipped.
fn design_says_retryable(design: &str, code: &str) -> Result<bool, String> {
    let list = list_after(
        design,
        "true only for transient classes (",
        "the retryable SQLSTATEs",
    )?;
    let mut listed = false;
    for item in list
        .split(',')
        .map(|item| item.split_whitespace().collect::<Vec<_>>())
    {
        match item.as_slice() {
            [class, "except", exception] if class.ends_with("xxx") => {
                listed |= code.starts_with(&class[..2]) && code != *exception;
            }
            [one] if one.len() == 5 => listed |= code == *one,
            [range] if range.len() == 11 && range.as_bytes()[5] == b'-' => {
                let (first, last) = (&range[..5], &range[6..]);
                listed |= first[..4] == last[..4]
                    && code[..code.len().min(4)] == first[..4]
                    && (first..=last).contains(&code);
            }
            _ => {}
        }
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_design_names_every_command_of_the_cli_in_its_order() {
        let design = design();
        let clap: Vec<String> = statek_cli::Cli::command()
            .get_subcommands()
            .map(|command| command.get_name().to_owned())
            .collect();
        assert_eq!(design_commands(&design).unwrap(), clap);
    }

    fn design() -> String {
        std::fs::read_to_string(crate::workspace::root().join("docs/design.md")).unwrap()
    }

    #[test]
    fn the_design_names_every_tenant_outcome_in_its_order() {
        assert_eq!(
            design_outcome_labels(&design()).unwrap(),
            statek_scheduler::TenantTickOutcome::LABELS
        );
    }

    #[test]
    fn the_design_names_every_slot_outcome_class_with_its_letter() {
        let code: Vec<(char, String)> = statek_scheduler::SlotClass::ALL
            .iter()
            .map(|class| (class.letter(), class.label().to_owned()))
            .collect();
        assert_eq!(design_slot_classes(&design()).unwrap(), code);
    }

    #[test]
    fn the_design_names_exactly_the_policy_algorithms() {
        let code: Vec<&str> = statek_policy::PolicyAlgorithm::ALL
            .iter()
            .map(|algorithm| algorithm.name())
            .collect();
        assert_eq!(design_algorithms(&design()).unwrap(), code);
    }

    #[test]
    fn stale_class_and_algorithm_lists_are_seen() {
        let design = "**Slot outcome classes** (V14).\n\n| letter | class |\n|---|---|\n\
                      | `c` | `claimed` | x |\n| `q` | `queued` | y |\n\nafter";
        assert_eq!(
            design_slot_classes(design).unwrap(),
            [('c', "claimed".to_owned()), ('q', "queued".to_owned())]
        );
        assert!(design_slot_classes("nothing").is_err());
        let design = "## 3. Policy\n`swrr-v1`, `statek.cycle.v1`, `min-gap-v1`/`swrr-v1`\n\
                      ## 4. Store\n`min-gap-v2`";
        assert_eq!(
            design_algorithms(design).unwrap(),
            ["swrr-v1", "min-gap-v1"]
        );
    }

    /// Every SQLSTATE the list names or borders on, and common ones it
    /// does not: the design and `is_retryable_sqlstate` agree on each.
    #[test]
    fn the_design_lists_exactly_the_retryable_sqlstates() {
        let design = design();
        let codes = [
            "08000", "08001", "08003", "08004", "08006", "08007", "08P01", "25006", "25001",
            "25P02", "40001", "40002", "40003", "40P01", "53300", "53100", "53200", "55P03",
            "55006", "55000", "57014", "57000", "57P01", "57P02", "57P03", "57P04", "57P05",
            "23505", "42501", "42P01", "0A000", "22012", "28000", "28P01", "3D000", "XX000",
            "SK001", "SK002",
        ];
        let mut retryable = 0;
        for code in codes {
            let code_says = statek_store_pg::error::is_retryable_sqlstate(code);
            assert_eq!(
                design_says_retryable(&design, code).unwrap(),
                code_says,
                "SQLSTATE {code}"
            );
            retryable += usize::from(code_says);
        }
        // 08000, 08001, 08003, 08004, 08006, 08007, 25006, 40001, 40P01,
        // 53300, 55P03, 57014, 57P01, 57P02, 57P03.
        assert_eq!(retryable, 15);
    }

    #[test]
    fn stale_outcome_and_sqlstate_lists_are_seen() {
        let design = "and the tenant outcome\n  (`Executed`, `Idle`).";
        assert_eq!(design_outcome_labels(design).unwrap(), ["executed", "idle"]);
        assert!(design_outcome_labels("nothing").is_err());
        let design = "true only for transient classes (connection loss, 08xxx except \
                      08P01, 40001, 57P01-57P02, a server in recovery).";
        for (code, listed) in [
            ("08006", true),
            ("08P01", false),
            ("40001", true),
            ("40P01", false),
            ("57P02", true),
            ("57P03", false),
        ] {
            assert_eq!(
                design_says_retryable(design, code).unwrap(),
                listed,
                "{code}"
            );
        }
        assert!(design_says_retryable("nothing", "40001").is_err());
    }

    #[test]
    fn a_stale_command_list_is_seen() {
        let design = "statek-cli the `statek` binary for operators (policy, migrate,\n   status; later audit).";
        assert_eq!(
            design_commands(design).unwrap(),
            ["policy", "migrate", "status"]
        );
        assert!(design_commands("nothing").is_err());
    }
}
