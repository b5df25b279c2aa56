//! The command line's flags and their parsers.

use super::*;
use std::time::Duration;

fn run_args(args: &[&str]) -> RunArgs {
    let cli = Cli::try_parse_from(["operon", "run"].iter().chain(args)).unwrap_or_else(|e| panic!("{e}"));
    match cli.command {
        Command::Run(args) => *args,
        other => panic!("{other:?}"),
    }
}

#[test]
fn durations_should_be_read_as_go_writes_them() {
    assert_eq!(duration("15s").ok(), Some(Duration::from_secs(15)));
    assert_eq!(duration("500ms").ok(), Some(Duration::from_millis(500)));
    assert_eq!(duration("1m30s").ok(), Some(Duration::from_secs(90)));
    assert_eq!(duration("1.5h").ok(), Some(Duration::from_secs(5400)));
    assert_eq!(duration("300us").ok(), Some(Duration::from_micros(300)));
    assert_eq!(duration("0").ok(), Some(Duration::ZERO));
    for bad in ["15", "", "s", "-5s", "15 s ", "fifteen seconds"] {
        assert!(duration(bad).is_err(), "{bad:?} was accepted");
    }
    assert!(duration("15").unwrap_err().to_string().contains("15s, 500ms or 1m30s"));
}

#[test]
fn run_flags_should_default_as_a_kubebuilder_manager() {
    let args = run_args(&[]);
    assert_eq!(args.metrics_bind_address, ":8443");
    assert!(args.metrics_secure);
    assert_eq!(args.health_probe_bind_address, ":8081");
    assert_eq!(args.leader_elect_lease_duration, Duration::from_secs(15));
    assert_eq!(args.leader_elect_renew_deadline, Duration::from_secs(10));
    assert_eq!(args.leader_elect_retry_period, Duration::from_secs(2));
    assert_eq!(args.metrics_serving(), crate::server::MetricsServing::Https { cert_dir: None });
    let plain = run_args(&["--metrics-secure=false"]);
    assert_eq!(plain.metrics_serving(), crate::server::MetricsServing::Http);
    assert!(run_args(&["--metrics-secure"]).metrics_secure);
}

#[test]
fn deprecated_flags_should_still_work_and_name_their_successors() {
    let mut args = run_args(&[
        "--lease-duration-secs=4",
        "--renew-deadline-ms",
        "3000",
        "--retry-period-ms=500",
        "--shutdown-timeout-secs=5",
        "--timeout-ms=250",
    ]);
    let warnings = args.resolve_deprecated();
    assert_eq!(args.leader_elect_lease_duration, Duration::from_secs(4));
    assert_eq!(args.leader_elect_renew_deadline, Duration::from_secs(3));
    assert_eq!(args.leader_elect_retry_period, Duration::from_millis(500));
    assert_eq!(args.graceful_shutdown_timeout, Duration::from_secs(5));
    assert_eq!(args.limits.limits().timeout, Duration::from_millis(250));
    assert_eq!(warnings.len(), 5, "{warnings:?}");
    assert!(warnings.contains(&"--renew-deadline-ms is deprecated (removed in the next minor release): use --leader-elect-renew-deadline=3s".to_string()), "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains("--guest-timeout=250ms")), "{warnings:?}");
    // Not both at once.
    assert!(
        Cli::try_parse_from(["operon", "run", "--lease-duration-secs=4", "--leader-elect-lease-duration=4s"]).is_err()
    );
    assert!(run_args(&[]).resolve_deprecated().is_empty());
}

#[test]
fn deprecated_flags_should_not_be_in_the_help() {
    use clap::CommandFactory as _;
    let mut command = Cli::command();
    let help = command.find_subcommand_mut("run").unwrap().render_long_help().to_string();
    assert!(help.contains("--leader-elect-lease-duration") && !help.contains("--lease-duration-secs"), "{help}");
}

#[test]
fn version_should_name_the_contract_and_every_sdk() {
    let text = version(false).unwrap();
    assert!(text.starts_with(&format!("operon {}\n", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.contains(&format!("contract operon:reconciler@{}", runtime::WIT_VERSION)), "{text}");
    for name in ["operon-sdk", "@operon/sdk", "operon.dev/sdk/go"] {
        assert!(text.contains(name), "{name} missing: {text}");
    }
    let json: serde_json::Value = serde_json::from_str(&version(true).unwrap()).unwrap();
    assert_eq!(json["sdks"].as_array().unwrap().len(), 5);
    assert_eq!(json["contract"]["version"], runtime::WIT_VERSION);
}
