//! Applies statek's migrations to the database named by `DATABASE_URL`.
//! Used by `cargo xtask migrate`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use statek_store_pg::{embedded_migrations, PgStore};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!("error: DATABASE_URL is not set");
        return std::process::ExitCode::from(2);
    };
    let result = async {
        let store = PgStore::connect(&url)?;
        store.migrate().await
    }
    .await;
    match result {
        Ok(report) => {
            for (version, name) in report.applied() {
                println!("applied V{version}__{name}");
            }
            let known = embedded_migrations();
            println!(
                "schema statek is current ({} migrations known, {} applied now)",
                known.len(),
                report.applied().len()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            // The whole cause chain ("... failed: ...: Connection refused").
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            eprintln!("error: {text}");
            std::process::ExitCode::FAILURE
        }
    }
}
