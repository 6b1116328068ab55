//! The UDP fault proxy: how a run without root partitions, delays, loses and duplicates the
//! traffic between real processes (QUIC runs over UDP).
//!
//! Each master listens on a private port; its peers and agents are told a public port of the
//! proxy instead ([`crate::LocalMasters::advertised`]). For every client socket that writes
//! to a public port, the proxy opens an upstream socket towards the master and relays both
//! ways. It learns which process a client socket belongs to from the process table
//! ([`SocketOwners`]), so a rule names processes, not ports: "agent-2 cannot reach master-1",
//! "every packet of master-3 is delayed 50-200 ms". Packets of sockets no run process owns
//! are never faulted (the run's own observer reads the masters' HTTP API over TCP, which
//! does not go through the proxy at all). Traffic stays on loopback.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tokio::net::UdpSocket;

use super::procs::SocketOwners;

/// What happens to the packets of one process, both ways.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct LinkFault {
    /// The chance a packet is dropped.
    pub loss: f64,
    /// The chance a packet is sent twice.
    pub duplicate: f64,
    /// Each packet waits a time drawn from this range (which reorders them).
    pub delay: (Duration, Duration),
}

/// The proxy's rules, changed while it runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    /// Directed links that carry nothing: `(from, to)` process names.
    pub cut: BTreeSet<(String, String)>,
    /// Processes whose every packet suffers a fault.
    pub degraded: BTreeMap<String, LinkFault>,
}

impl Rules {
    /// Cuts both directions between every process of `a` and every process of `b`.
    pub fn cut_between(&mut self, a: &[String], b: &[String]) {
        for x in a {
            for y in b {
                self.cut.insert((x.clone(), y.clone()));
                self.cut.insert((y.clone(), x.clone()));
            }
        }
    }
}

/// What the proxy did to packets.
#[derive(Debug, Default, Serialize)]
pub struct ProxyStats {
    /// Packets relayed.
    pub relayed: AtomicU64,
    /// Dropped by a cut link.
    pub cut: AtomicU64,
    /// Dropped by loss.
    pub lost: AtomicU64,
    /// Sent twice.
    pub duplicated: AtomicU64,
    /// Held back by a delay.
    pub delayed: AtomicU64,
}

/// The proxy, serving on its own runtime until dropped.
pub struct FaultProxy {
    runtime: tokio::runtime::Runtime,
    public: BTreeMap<String, SocketAddr>,
    rules: Arc<Mutex<Rules>>,
    stats: Arc<ProxyStats>,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[error("fault proxy: {what}: {source}")]
pub struct ProxyError {
    what: String,
    source: std::io::Error,
}

struct Shared {
    rules: Arc<Mutex<Rules>>,
    stats: Arc<ProxyStats>,
    owners: SocketOwners,
    rng: Mutex<ChaCha8Rng>,
}

/// What to do with one packet.
enum Fate {
    Drop,
    Send { copies: usize, delay: Duration },
}

impl Shared {
    fn fate(&self, from: Option<&str>, to: Option<&str>) -> Fate {
        let (Some(from), Some(to)) = (from, to) else {
            return Fate::Send {
                copies: 1,
                delay: Duration::ZERO,
            };
        };
        let Ok(rules) = self.rules.lock() else {
            return Fate::Drop;
        };
        if rules.cut.contains(&(from.to_string(), to.to_string())) {
            self.stats.cut.fetch_add(1, Ordering::Relaxed);
            return Fate::Drop;
        }
        let mut copies = 1;
        let mut delay = Duration::ZERO;
        let Ok(mut rng) = self.rng.lock() else {
            return Fate::Drop;
        };
        for name in [from, to] {
            let Some(fault) = rules.degraded.get(name) else {
                continue;
            };
            if rng.gen_bool(fault.loss.clamp(0.0, 1.0)) {
                self.stats.lost.fetch_add(1, Ordering::Relaxed);
                return Fate::Drop;
            }
            if rng.gen_bool(fault.duplicate.clamp(0.0, 1.0)) {
                copies = 2;
            }
            let (low, high) = fault.delay;
            if high > Duration::ZERO {
                delay += if high > low {
                    rng.gen_range(low..=high)
                } else {
                    low
                };
            }
        }
        if copies > 1 {
            self.stats.duplicated.fetch_add(1, Ordering::Relaxed);
        }
        if delay > Duration::ZERO {
            self.stats.delayed.fetch_add(1, Ordering::Relaxed);
        }
        Fate::Send { copies, delay }
    }
}

/// Sends `packet` to `to` through `socket` as `fate` says, later if it is delayed.
fn deliver(socket: &Arc<UdpSocket>, packet: Vec<u8>, to: Option<SocketAddr>, fate: Fate) {
    let Fate::Send { copies, delay } = fate else {
        return;
    };
    let socket = Arc::clone(socket);
    let send = async move {
        for _ in 0..copies {
            let _ = match to {
                Some(to) => socket.send_to(&packet, to).await,
                None => socket.send(&packet).await,
            };
        }
    };
    if delay.is_zero() {
        tokio::spawn(send);
    } else {
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            send.await;
        });
    }
}

/// One client socket's relay: its upstream socket and who owns it.
struct Flow {
    upstream: Arc<UdpSocket>,
    owner: Arc<Mutex<Option<String>>>,
    resolved_at: Instant,
}

/// How long an unknown client socket stays unknown before its owner is looked up again.
const OWNER_RETRY: Duration = Duration::from_millis(200);

impl FaultProxy {
    /// Starts a public port for each `(name, address)` of `targets`; rules name processes
    /// as `owners` and `targets` do; `seed` drives loss, duplication and delay draws.
    pub fn start(
        targets: &BTreeMap<String, SocketAddr>,
        owners: SocketOwners,
        seed: u64,
    ) -> Result<FaultProxy, ProxyError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .map_err(|source| ProxyError {
                what: "start its runtime".into(),
                source,
            })?;
        let rules = Arc::new(Mutex::new(Rules::default()));
        let stats = Arc::new(ProxyStats::default());
        let shared = Arc::new(Shared {
            rules: Arc::clone(&rules),
            stats: Arc::clone(&stats),
            owners,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
        });
        let mut public = BTreeMap::new();
        for (name, target) in targets {
            let socket = runtime
                .block_on(UdpSocket::bind("127.0.0.1:0"))
                .map_err(|source| ProxyError {
                    what: format!("bind a public port for {name}"),
                    source,
                })?;
            let addr = socket.local_addr().map_err(|source| ProxyError {
                what: "read a bound socket's address".into(),
                source,
            })?;
            public.insert(name.clone(), addr);
            runtime.spawn(serve(
                Arc::new(socket),
                name.clone(),
                *target,
                Arc::clone(&shared),
            ));
        }
        Ok(FaultProxy {
            runtime,
            public,
            rules,
            stats,
        })
    }

    /// The public address of each target.
    pub fn public(&self) -> &BTreeMap<String, SocketAddr> {
        &self.public
    }

    /// Replaces the rules.
    pub fn set_rules(&self, rules: Rules) {
        if let Ok(mut current) = self.rules.lock() {
            *current = rules;
        }
    }

    /// The rules in force.
    pub fn rules(&self) -> Rules {
        self.rules.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// What was done to packets so far.
    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }

    /// Stops relaying.
    pub fn stop(self) {
        self.runtime.shutdown_background();
    }
}

/// Relays between clients and `target` (named `name`) through `public`.
async fn serve(public: Arc<UdpSocket>, name: String, target: SocketAddr, shared: Arc<Shared>) {
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    let mut buffer = vec![0u8; 65_536];
    loop {
        let Ok((len, client)) = public.recv_from(&mut buffer).await else {
            continue;
        };
        let flow = match flows.get_mut(&client) {
            Some(flow) => flow,
            None => {
                let Ok(upstream) = UdpSocket::bind("127.0.0.1:0").await else {
                    continue;
                };
                if upstream.connect(target).await.is_err() {
                    continue;
                }
                let upstream = Arc::new(upstream);
                let owner = Arc::new(Mutex::new(shared.owners.owner(client)));
                tokio::spawn(relay_back(
                    Arc::clone(&upstream),
                    Arc::clone(&public),
                    client,
                    name.clone(),
                    Arc::clone(&owner),
                    Arc::clone(&shared),
                ));
                flows.entry(client).or_insert(Flow {
                    upstream,
                    owner,
                    resolved_at: Instant::now(),
                })
            }
        };
        let unknown = flow.owner.lock().map(|o| o.is_none()).unwrap_or(false);
        if unknown && flow.resolved_at.elapsed() > OWNER_RETRY {
            flow.resolved_at = Instant::now();
            if let (Some(found), Ok(mut owner)) = (shared.owners.owner(client), flow.owner.lock()) {
                *owner = Some(found);
            }
        }
        let from = flow.owner.lock().ok().and_then(|o| o.clone());
        let fate = shared.fate(from.as_deref(), Some(&name));
        if matches!(fate, Fate::Send { .. }) {
            shared.stats.relayed.fetch_add(1, Ordering::Relaxed);
        }
        deliver(&flow.upstream, buffer[..len].to_vec(), None, fate);
    }
}

/// Relays `target`'s answers to `client`.
async fn relay_back(
    upstream: Arc<UdpSocket>,
    public: Arc<UdpSocket>,
    client: SocketAddr,
    name: String,
    owner: Arc<Mutex<Option<String>>>,
    shared: Arc<Shared>,
) {
    let mut buffer = vec![0u8; 65_536];
    loop {
        let Ok(len) = upstream.recv(&mut buffer).await else {
            // The target is down (ICMP port unreachable): it may come back.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let to = owner.lock().ok().and_then(|o| o.clone());
        let fate = shared.fate(Some(&name), to.as_deref());
        if matches!(fate, Fate::Send { .. }) {
            shared.stats.relayed.fetch_add(1, Ordering::Relaxed);
        }
        deliver(&public, buffer[..len].to_vec(), Some(client), fate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server behind the proxy; this process, named `client`, talks to it.
    fn setup() -> (FaultProxy, std::net::UdpSocket, SocketAddr) {
        let echo = std::net::UdpSocket::bind("127.0.0.1:0").expect("binds");
        let target = echo.local_addr().expect("address");
        std::thread::spawn(move || {
            let mut buffer = [0u8; 1500];
            while let Ok((len, from)) = echo.recv_from(&mut buffer) {
                let _ = echo.send_to(&buffer[..len], from);
            }
        });
        let owners = SocketOwners::default();
        owners.insert(std::process::id(), "client");
        let targets = BTreeMap::from([("server".to_string(), target)]);
        let proxy = FaultProxy::start(&targets, owners, 7).expect("starts");
        let public = proxy.public()["server"];
        let client = std::net::UdpSocket::bind("127.0.0.1:0").expect("binds");
        client
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("timeout");
        (proxy, client, public)
    }

    fn echoes(client: &std::net::UdpSocket, public: SocketAddr, text: &[u8]) -> usize {
        client.send_to(text, public).expect("sends");
        let mut got = 0;
        let mut buffer = [0u8; 1500];
        while let Ok(len) = client.recv(&mut buffer) {
            assert_eq!(&buffer[..len], text);
            got += 1;
        }
        got
    }

    #[test]
    fn relays_both_ways_and_obeys_cuts_duplication_and_delays() {
        let (proxy, client, public) = setup();
        assert_eq!(echoes(&client, public, b"hello"), 1);

        let mut rules = Rules::default();
        rules
            .cut
            .insert(("server".to_string(), "client".to_string()));
        proxy.set_rules(rules);
        assert_eq!(echoes(&client, public, b"one way"), 0, "answers are cut");
        assert!(proxy.stats().cut.load(Ordering::Relaxed) >= 1);

        let mut rules = Rules::default();
        rules.degraded.insert(
            "client".to_string(),
            LinkFault {
                duplicate: 1.0,
                ..LinkFault::default()
            },
        );
        proxy.set_rules(rules);
        // Duplicated on the way there and on the way back.
        assert_eq!(echoes(&client, public, b"twice"), 4);

        let mut rules = Rules::default();
        rules.degraded.insert(
            "client".to_string(),
            LinkFault {
                delay: (Duration::from_millis(150), Duration::from_millis(150)),
                ..LinkFault::default()
            },
        );
        proxy.set_rules(rules);
        let started = Instant::now();
        assert_eq!(echoes(&client, public, b"late"), 1);
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "delayed both ways"
        );

        let mut rules = Rules::default();
        rules.degraded.insert(
            "client".to_string(),
            LinkFault {
                loss: 1.0,
                ..LinkFault::default()
            },
        );
        proxy.set_rules(rules);
        assert_eq!(echoes(&client, public, b"lost"), 0);
        proxy.set_rules(Rules::default());
        assert_eq!(echoes(&client, public, b"healed"), 1);
        proxy.stop();
    }
}
