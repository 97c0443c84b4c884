//! docs/design.md against the code, for the facts it enumerates that the
//! code can list: the `statek` binary's commands (its crate map names them,
//! in clap's order).

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_design_names_every_command_of_the_cli_in_its_order() {
        let design =
            std::fs::read_to_string(crate::workspace::root().join("docs/design.md")).unwrap();
        let clap: Vec<String> = statek_cli::Cli::command()
            .get_subcommands()
            .map(|command| command.get_name().to_owned())
            .collect();
        assert_eq!(design_commands(&design).unwrap(), clap);
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
