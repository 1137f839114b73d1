//! Command-line interface: the subcommands, their usage text, and dispatch.

use std::ffi::OsString;

use crate::{Result, config::Config, logging, operator};

/// Usage text printed by `--help` and after an argument error.
pub const USAGE: &str = "\
mutantops: run one base Deployment as several variants

Usage:
  mutantops [run]      run the operator (controllers, HTTP API, metrics)
  mutantops crd        print the CustomResourceDefinitions as YAML
  mutantops --help     print this help
  mutantops --version  print the version

Environment:
  MUTANT_API_ADDR       HTTP API listen address (default 0.0.0.0:8080)
  MUTANT_METRICS_ADDR   metrics and probes listen address (default 0.0.0.0:9568)
  MUTANT_API_TOKEN      admin token for the HTTP API (optional; at least 32 characters)
  MUTANT_API_INSECURE   true: serve the HTTP API without auth (local development only;
                        a loopback MUTANT_API_ADDR only)
  MUTANT_API_INSECURE_ALLOW_REMOTE
                        true: allow MUTANT_API_INSECURE on an address others can reach
  MUTANT_API_TLS_CERT_FILE, MUTANT_API_TLS_KEY_FILE
                        PEM certificate chain and key: the HTTP API speaks HTTPS only
                        (both or neither; re-read when they change)
  MUTANT_WATCH_NAMESPACE  reconcile only this namespace (default: all namespaces)
  MUTANT_LOG_FORMAT     text (default) or json
  RUST_LOG              log filter, e.g. info or mutantops=debug
  KUBECONFIG            kubeconfig used outside a cluster";

/// What the binary was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Run the operator.
    Run,
    /// Print the CRDs.
    Crd,
    /// Print the usage text.
    Help,
    /// Print the version.
    Version,
}

/// Parses the arguments after the program name. An error is a message for the user.
pub fn parse<I>(args: I) -> Result<Command, String>
where
    I: IntoIterator<Item = OsString>,
{
    let args: Vec<OsString> = args.into_iter().collect();
    let words: Vec<&str> = args
        .iter()
        .map(|a| {
            a.to_str()
                .ok_or_else(|| format!("argument {a:?} is not valid UTF-8"))
        })
        .collect::<Result<_, _>>()?;
    match words.as_slice() {
        [] | ["run"] => Ok(Command::Run),
        ["crd"] => Ok(Command::Crd),
        ["-h" | "--help" | "help"] => Ok(Command::Help),
        ["-V" | "--version" | "version"] => Ok(Command::Version),
        [first] => Err(format!("unknown argument '{first}'")),
        [_, extra, ..] => Err(format!("unexpected argument '{extra}'")),
    }
}

/// Runs a command that does real work (not `--help` or `--version`).
pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Crd => crate::crd::print_crds(),
        Command::Run => {
            let config = Config::from_env(|name| std::env::var_os(name))?;
            logging::init(config.log_format);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(operator::run(config))
        }
        Command::Help | Command::Version => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str]) -> Result<Command, String> {
        parse(words.iter().map(OsString::from))
    }

    #[test]
    fn subcommands() {
        assert_eq!(parse_words(&[]), Ok(Command::Run));
        assert_eq!(parse_words(&["run"]), Ok(Command::Run));
        assert_eq!(parse_words(&["crd"]), Ok(Command::Crd));
        assert_eq!(parse_words(&["--help"]), Ok(Command::Help));
        assert_eq!(parse_words(&["-h"]), Ok(Command::Help));
        assert_eq!(parse_words(&["--version"]), Ok(Command::Version));
        assert_eq!(parse_words(&["-V"]), Ok(Command::Version));
    }

    #[test]
    fn unknown_arguments_are_errors() {
        assert_eq!(
            parse_words(&["--bogus"]),
            Err("unknown argument '--bogus'".to_string())
        );
        assert_eq!(
            parse_words(&["crd", "x"]),
            Err("unexpected argument 'x'".to_string())
        );
        assert_eq!(
            parse_words(&["run", "--now"]),
            Err("unexpected argument '--now'".to_string())
        );
    }
}
