//! `guild-node`: routerd with the guild types and the name search, served
//! from a routerd config file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(about = "A routerd node serving guilds (routerd's own types included)")]
struct Args {
    /// A routerd config file (`routerd check-config` shows every key).
    #[arg(long)]
    config: Option<PathBuf>,
    /// This node's weight in the guild name search; 0 keeps it out of the
    /// search unless every node that runs it has 0. Default: the config's
    /// `[services.guild_search] weight`, else 1.
    #[arg(long)]
    search_weight: Option<u32>,
    /// Do not run the name search here (the other nodes' still answers
    /// this node's clients).
    #[arg(long)]
    no_search: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ROUTERD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Plain text unless a person reads it: scripts (and the tests)
        // parse the "routerd serving" line for the addresses.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = match routerd::config::Config::load(args.config.as_deref()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("guild-node: {error}");
            return ExitCode::FAILURE;
        }
    };
    let settings: guild::SearchConfig = match config.services.section("guild_search") {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("guild-node: {error}");
            return ExitCode::FAILURE;
        }
    };
    let weight = args.search_weight.unwrap_or(settings.weight);
    let search_weight = (!args.no_search).then_some(weight);
    match guild::node(config, search_weight).serve() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("guild-node: {error}");
            ExitCode::FAILURE
        }
    }
}
