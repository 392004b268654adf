//! Start-up errors and arguments (no redis needed): a busy port and an unreachable upstream are
//! clear errors, arguments take humantime durations, the config file sets up the timer service,
//! and `--help` says what protects against hostile clients.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::time::Duration;

use clap::Parser as _;
use wheel_shard::{Config, TimerService};

use crate::idle_proxy::{Args, Limits, Proxy, StartError};
use crate::redis_harness::*;
use crate::{idle_proxy, LOOPBACK};

fn bind_error(listen: SocketAddr, upstream: SocketAddr) -> StartError {
    let limits = Limits::new(Duration::from_secs(1));
    client_runtime().block_on(async {
        let timers = TimerService::new(Config::default()).expect("timer service");
        match Proxy::bind(listen, upstream, limits, timers).await {
            Ok(_) => panic!("bind({listen}, upstream {upstream}) succeeded"),
            Err(error) => error,
        }
    })
}

#[test]
fn a_busy_port_is_a_clear_error() {
    let taken = StdListener::bind((LOOPBACK, 0)).expect("bind");
    let busy = taken.local_addr().expect("addr");
    let message = bind_error(busy, busy).to_string();
    assert!(
        message.starts_with(&format!("cannot listen on {busy}: ")),
        "{message}"
    );
    assert!(message.contains("in use"), "{message}");
}

#[test]
fn an_unreachable_upstream_is_a_clear_error() {
    // A socket bound and not listening holds its port: a connect to it is refused, and no
    // other test running alongside can take the port meanwhile (a port found free and let go
    // could be, and once was).
    let holder = tokio::net::TcpSocket::new_v4().expect("a socket");
    holder
        .bind(SocketAddr::from((LOOPBACK, 0)))
        .expect("bind a free port");
    let nobody = holder.local_addr().expect("local addr");
    let message = bind_error(SocketAddr::from((LOOPBACK, 0)), nobody).to_string();
    assert!(
        message.starts_with(&format!("upstream {nobody} is unreachable: ")),
        "{message}"
    );
    assert!(message.contains("refused"), "{message}");
}

#[test]
fn arguments_take_humantime_durations() {
    let args = Args::try_parse_from([
        "idle_proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:6379",
        "--idle",
        "1m 30s",
        "--request-timeout",
        "250ms",
        "--config",
        "wheel.toml",
    ])
    .expect("valid arguments");
    assert_eq!(args.idle, Duration::from_secs(90));
    assert_eq!(args.request_timeout, Some(Duration::from_millis(250)));
    let bad = Args::try_parse_from([
        "idle_proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:1",
        "--idle",
        "soon",
    ]);
    assert!(bad.is_err_and(|e| e.to_string().contains("soon")));
}

#[test]
fn the_config_file_sets_up_the_timer_service() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("wheel.toml");
    std::fs::write(&good, "shards = 1\ntick = \"2ms\"\n").expect("write config");
    let config = idle_proxy::load_config(Some(&good)).expect("valid config");
    assert_eq!((config.shards, config.tick), (1, Duration::from_millis(2)));

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "tick = \"0ms\"\n").expect("write config");
    let message = idle_proxy::load_config(Some(&bad)).unwrap_err().to_string();
    assert!(
        message.contains("bad.toml") && message.contains("tick"),
        "{message}"
    );
}

#[test]
fn help_says_what_protects_against_hostile_clients() {
    let help = <Args as clap::CommandFactory>::command()
        .render_long_help()
        .to_string();
    for needed in [
        "Slowloris",
        "--request-timeout closes",
        "Descriptor floods",
        "--max-connections caps",
        "ulimit -n",
        "backs off",
        "Slow readers",
    ] {
        assert!(help.contains(needed), "--help lacks {needed:?}:\n{help}");
    }
}
