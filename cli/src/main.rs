//! `benchlake`: the one binary. Parses flags and sets up logging; the services
//! live in their library crates.
use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "benchlake", version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
