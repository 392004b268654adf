//! The systems under test: wheel ([`wheel()`]) and each [`Peer`]. The runner sees them all
//! through one trait, [`System`]. In-process systems implement
//! the harness's smaller [`Timers`] and run under its shared
//! driver; Netty runs in a JVM and implements `System` itself.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::harness::system::{InProcess, System};
use crate::harness::timers::Timers;

mod binary_heap;
mod delay_queue;
mod netty;
mod tokio_sleep;
mod wheel;

/// The peers wheel is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Peer {
    DelayQueue,
    TokioSleep,
    BinaryHeap,
    Netty,
}

impl Peer {
    /// Every peer, in table order.
    pub const ALL: [Peer; 4] = [
        Peer::DelayQueue,
        Peer::TokioSleep,
        Peer::BinaryHeap,
        Peer::Netty,
    ];

    /// The peer's system.
    pub(crate) fn system(self) -> Box<dyn System> {
        match self {
            Peer::DelayQueue => Box::new(InProcess::<delay_queue::DelayQueueTimers>::new()),
            Peer::TokioSleep => Box::new(InProcess::<tokio_sleep::TokioSleepTimers>::new()),
            Peer::BinaryHeap => Box::new(InProcess::<binary_heap::HeapTimers>::new()),
            Peer::Netty => Box::new(netty::Netty),
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Peer::DelayQueue => delay_queue::DelayQueueTimers::NAME,
            Peer::TokioSleep => tokio_sleep::TokioSleepTimers::NAME,
            Peer::BinaryHeap => binary_heap::HeapTimers::NAME,
            Peer::Netty => netty::NAME,
        }
    }
}

impl FromStr for Peer {
    type Err = String;

    fn from_str(s: &str) -> Result<Peer, String> {
        Peer::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Peer::ALL.iter().map(|p| p.name()).collect();
                format!("unknown peer {s:?} (one of {}, or none)", names.join(", "))
            })
    }
}

/// Parses `--peers`: `none`, `all`, or a comma-separated list.
pub(crate) fn parse_peers(text: &str) -> Result<Vec<Peer>, String> {
    match text.trim() {
        "none" | "" => Ok(Vec::new()),
        "all" => Ok(Peer::ALL.to_vec()),
        list => {
            let mut peers = Vec::new();
            for name in list.split(',').map(str::trim) {
                let peer: Peer = name.parse()?;
                if !peers.contains(&peer) {
                    peers.push(peer);
                }
            }
            Ok(peers)
        }
    }
}

/// The system named `name`: wheel or a peer.
pub(crate) fn system_named(name: &str) -> Result<Box<dyn System>, String> {
    if name == wheel::WheelTimers::NAME {
        return Ok(wheel());
    }
    Ok(name.parse::<Peer>()?.system())
}

/// wheel itself, as a [`System`].
pub(crate) fn wheel() -> Box<dyn System> {
    Box::new(InProcess::<wheel::WheelTimers>::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_lists_parse() {
        assert!(parse_peers("none").unwrap().is_empty());
        assert_eq!(parse_peers("all").unwrap().len(), 4);
        assert_eq!(
            parse_peers("netty, binary-heap").unwrap(),
            vec![Peer::Netty, Peer::BinaryHeap]
        );
        assert!(parse_peers("kafka").unwrap_err().contains("kafka"));
        assert_eq!(system_named("wheel").unwrap().name(), "wheel");
        assert!(system_named("kafka").is_err());
    }
}
