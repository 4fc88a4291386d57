//! What is generated from the command line's own definition: `ctxbridge completions SHELL`
//! (clap_complete), `ctxbridge man` (clap_mangen) and `ctxbridge help [COMMAND…]`, which
//! replaces clap's built-in `help` subcommand so that `ctxbridge help --help` works like every
//! other command's `--help`.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::context::{CliError, CommandContext, EXIT_OK};
use crate::cli::Cli;

/// `ctxbridge completions` arguments.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `ctxbridge man` arguments (none: the page covers every subcommand).
#[derive(Debug, Clone, Args)]
pub struct ManArgs {}

/// `ctxbridge help` arguments.
#[derive(Debug, Clone, Args)]
pub struct HelpArgs {
    /// The subcommand (and its subcommands) to show the help of; none for ctxbridge's own.
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Writes the completion script for `args.shell` on stdout.
pub fn completions(context: &CommandContext, args: CompletionsArgs) -> Result<u8, CliError> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "ctxbridge", &mut script);
    context.stdout.write(&String::from_utf8_lossy(&script));
    Ok(EXIT_OK)
}

/// Writes the manual page on stdout: ctxbridge's own section, then one section per subcommand.
pub fn man(context: &CommandContext, _args: ManArgs) -> Result<u8, CliError> {
    let page = man_page().map_err(CliError::io("render the manual page"))?;
    context.stdout.write(&page);
    Ok(EXIT_OK)
}

/// The manual page in roff: the top-level page, then each subcommand's options under a
/// heading of its own.
pub fn man_page() -> std::io::Result<String> {
    let mut command = Cli::command();
    // Building sets each subcommand's bin name (`ctxbridge doctor`), which its synopsis shows.
    command.build();
    let mut roff = Vec::new();
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(&mut roff)?;
    man.render_name_section(&mut roff)?;
    man.render_synopsis_section(&mut roff)?;
    man.render_description_section(&mut roff)?;
    man.render_options_section(&mut roff)?;
    man.render_subcommands_section(&mut roff)?;
    for sub in command.get_subcommands() {
        let name = format!("ctxbridge {}", sub.get_name());
        let sub_man = clap_mangen::Man::new(sub.clone());
        roff.extend_from_slice(format!(".SH \"{}\"\n", name.to_uppercase()).as_bytes());
        sub_man.render_synopsis_section(&mut roff)?;
        sub_man.render_description_section(&mut roff)?;
        sub_man.render_options_section(&mut roff)?;
    }
    man.render_version_section(&mut roff)?;
    Ok(String::from_utf8_lossy(&roff).into_owned())
}

/// Prints the long help of ctxbridge or of the named subcommand; an unknown name is a usage
/// error listing the subcommands.
pub fn help(context: &CommandContext, args: HelpArgs) -> Result<u8, CliError> {
    let mut command = Cli::command();
    command.build();
    let mut current = &mut command;
    let mut path = vec!["ctxbridge".to_string()];
    for name in &args.command {
        let known: Vec<String> = current
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        match current.find_subcommand_mut(name) {
            Some(sub) => current = sub,
            None => {
                return Err(CliError::Usage(format!(
                    "help: `{}` has no subcommand {name:?}; it has: {}",
                    path.join(" "),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )))
            }
        }
        path.push(name.clone());
    }
    context
        .stdout
        .write(&current.render_long_help().to_string());
    Ok(EXIT_OK)
}
