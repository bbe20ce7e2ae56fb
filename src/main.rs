use clap::{Parser, Subcommand};
use hmdp::{Config, startup};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "hmdp", version, about = "Voucher flash-sale backend")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    config: Config,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = startup::Application::build(cli.config).await?;
            app.run_until(startup::shutdown_signal()).await
        }
    }
}
