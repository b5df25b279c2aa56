//! Leader election against a real API server: the Lease protocol's promises
//! (one leader, fail-over after a crash, hand-over on shutdown, a cut-off
//! leader stepping down before anyone else starts) hold with kube-apiserver's
//! own conflict detection, not a fake's.
//!
//! Timings are short (lease 3 s, renew deadline 2 s, retry 0.5 s), and every
//! bound asserted is one the protocol guarantees, widened by a second of
//! slack for request latency on a loaded machine.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use operon::leader::{Config, LeaderElector};
use operon_envtest::{create_namespace, shared};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, timeout};

const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(500);
/// Room for request latency and scheduling on a busy machine; never used to
/// tighten a bound, only to widen one.
const SLACK: Duration = Duration::from_secs(1);
const NAME: &str = "operon";

fn init_logs() {
    crate::common::logs::init();
}

async fn setup(prefix: &str) -> (Client, String) {
    init_logs();
    let client = shared().client().await;
    let namespace = create_namespace(&client, prefix).await.unwrap();
    (client, namespace)
}

/// A running elector, the changes of its channel with when they happened,
/// and ways to stop it.
struct Candidate {
    identity: String,
    leading: watch::Receiver<bool>,
    history: Arc<Mutex<Vec<(Instant, bool)>>>,
    task: JoinHandle<()>,
    stop: Option<oneshot::Sender<()>>,
}

fn start(client: Client, namespace: &str, identity: &str) -> Candidate {
    let config = Config {
        identity: identity.to_owned(),
        lease_duration: LEASE,
        renew_deadline: RENEW,
        retry_period: RETRY,
        ..Config::new(namespace, NAME)
    };
    let elector = LeaderElector::new(client, config).unwrap();
    let leading = elector.subscribe();
    let history = Arc::new(Mutex::new(Vec::new()));
    let mut changes = elector.subscribe();
    let recorded = history.clone();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            let now = *changes.borrow_and_update();
            recorded.lock().unwrap().push((Instant::now(), now));
        }
    });
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(elector.run(async move {
        let _ = stopped.await;
    }));
    Candidate { identity: identity.to_owned(), leading, history, task, stop: Some(stop) }
}

impl Candidate {
    fn leads(&self) -> bool {
        *self.leading.borrow()
    }

    /// Waits, at most `within`, for the channel to say `leading`; returns
    /// when it did.
    async fn until(&mut self, leading: bool, within: Duration) -> Instant {
        let who = self.identity.clone();
        timeout(within, self.leading.wait_for(|now| *now == leading))
            .await
            .unwrap_or_else(|_| panic!("{who} did not turn leading={leading} within {within:?}"))
            .unwrap();
        Instant::now()
    }

    /// The periods during which the channel said `true`.
    fn terms(&self) -> Vec<(Instant, Option<Instant>)> {
        let mut terms = Vec::new();
        for &(at, leading) in self.history.lock().unwrap().iter() {
            if leading {
                terms.push((at, None));
            } else if let Some(last) = terms.last_mut() {
                last.1 = Some(at);
            }
        }
        terms
    }
}

/// Fails if `a` and `b` ever said `true` at the same time.
fn assert_never_both(a: &Candidate, b: &Candidate) {
    for (a_start, a_end) in a.terms() {
        for (b_start, b_end) in b.terms() {
            let disjoint = a_end.is_some_and(|end| end <= b_start) || b_end.is_some_and(|end| end <= a_start);
            assert!(
                disjoint,
                "{} and {} led at once: {:?} and {:?}",
                a.identity,
                b.identity,
                (a_start, a_end),
                (b_start, b_end)
            );
        }
    }
}

async fn lease_spec(client: &Client, namespace: &str) -> LeaseSpec {
    Api::<Lease>::namespaced(client.clone(), namespace).get(NAME).await.unwrap().spec.unwrap()
}

#[tokio::test]
async fn two_electors_should_elect_exactly_one() {
    let (client, namespace) = setup("leader-one").await;
    let mut a = start(client.clone(), &namespace, "a");
    let mut b = start(client.clone(), &namespace, "b");

    tokio::select! {
        at = a.until(true, 10 * LEASE) => at,
        at = b.until(true, 10 * LEASE) => at,
    };
    let (leader, follower) = if a.leads() { (&a, &b) } else { (&b, &a) };
    let (leader, follower) = (leader.identity.clone(), follower.identity.clone());

    // Over two lease durations, renewals keep the same one leading.
    let watched = Instant::now();
    while watched.elapsed() < 2 * LEASE {
        let leaders: Vec<_> = [&a, &b].iter().filter(|c| c.leads()).map(|c| c.identity.as_str()).collect();
        assert_eq!(leaders, [leader.as_str()], "exactly {leader} leads");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let spec = lease_spec(&client, &namespace).await;
    assert_eq!(spec.holder_identity.as_deref(), Some(leader.as_str()));
    assert_eq!(spec.lease_transitions, Some(0), "{follower} never took it");
    assert_never_both(&a, &b);
    a.task.abort();
    b.task.abort();
}

#[tokio::test]
async fn a_killed_leader_should_be_replaced_once_its_lease_expires() {
    let (client, namespace) = setup("leader-kill").await;
    let mut a = start(client.clone(), &namespace, "a");
    a.until(true, 10 * LEASE).await;
    let mut b = start(client.clone(), &namespace, "b");
    tokio::time::sleep(LEASE).await;
    assert!(a.leads() && !b.leads());

    // Like kill -9: no release, the Lease just stops being renewed.
    a.task.abort();
    let killed = Instant::now();
    // b saw a's last renewal at most a retry period after it was sent, and
    // notices the expiry at most a retry period after it.
    let b_leads = b.until(true, LEASE + 2 * RETRY + SLACK).await;
    let took = b_leads - killed;
    eprintln!("kill: b led {took:?} after a was killed (lease {LEASE:?})");
    // a renewed at most a retry period (plus a request) before the kill, so
    // b cannot have waited much less than the lease.
    assert!(took >= LEASE - RETRY - SLACK, "b took over too early: {took:?}");

    let spec = lease_spec(&client, &namespace).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    b.task.abort();
}

#[tokio::test]
async fn a_clean_shutdown_should_hand_over_within_a_retry_period() {
    let (client, namespace) = setup("leader-release").await;
    let mut a = start(client.clone(), &namespace, "a");
    a.until(true, 10 * LEASE).await;
    let mut b = start(client.clone(), &namespace, "b");
    tokio::time::sleep(LEASE).await;
    assert!(!b.leads());

    let stopped = Instant::now();
    a.stop.take().unwrap().send(()).unwrap();
    timeout(RENEW + SLACK, &mut a.task).await.expect("a returned").unwrap();
    assert!(!a.leads());
    let b_leads = b.until(true, RETRY + SLACK).await;
    eprintln!("release: b led {:?} after a was told to stop (retry {RETRY:?})", b_leads - stopped);

    assert_never_both(&a, &b);
    let spec = lease_spec(&client, &namespace).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    b.task.abort();
}

/// What a [`Proxy`] does to traffic once cut.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cut {
    /// Connections stay open and requests go unanswered: a partition.
    Hang,
    /// Connections close and new ones are refused: a dead address.
    Refuse,
}

/// A TCP relay to the API server that the test can cut, standing for the
/// network between one replica and the API server. TLS passes through it;
/// the serving certificate is for 127.0.0.1, whatever the port.
struct Proxy {
    url: String,
    cut: watch::Sender<Option<Cut>>,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("https://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let (cut, cuts) = watch::channel(None);
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            let mut held = Vec::new();
            let mut refusal = cuts.clone();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((mut client, _)) = accepted else { continue };
                        if *cuts.borrow() == Some(Cut::Hang) {
                            held.push(client);
                            continue;
                        }
                        let upstream = upstream.clone();
                        let mut cuts = cuts.clone();
                        connections.spawn(async move {
                            let Ok(mut server) = TcpStream::connect(&upstream).await else { return };
                            let cut = tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
                                cut = cuts.wait_for(Option::is_some) => cut.ok().and_then(|cut| *cut),
                            };
                            if cut == Some(Cut::Hang) {
                                // Keep both sockets open, silent.
                                std::future::pending::<()>().await;
                            }
                        });
                    }
                    // Dropping the listener and the connections refuses and
                    // resets everything.
                    _ = refusal.wait_for(|cut| *cut == Some(Cut::Refuse)) => return,
                }
            }
        });
        Proxy { url, cut, task }
    }

    fn client(&self) -> Client {
        let mut config = shared().config();
        config.cluster_url = self.url.parse().unwrap();
        Client::try_from(config).unwrap()
    }

    fn cut(&self, how: Cut) {
        self.cut.send_replace(Some(how));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// a reaches the API server through a proxy, b directly; the proxy is cut.
async fn cut_off_leader_steps_down_before_a_standby_leads(how: Cut) {
    let (client, namespace) = setup(&format!("leader-{how:?}").to_lowercase()).await;
    let proxy = Proxy::start(shared().server()).await;
    let mut a = start(proxy.client(), &namespace, "a");
    a.until(true, 10 * LEASE).await;
    let mut b = start(client.clone(), &namespace, "b");
    tokio::time::sleep(LEASE).await;
    assert!(a.leads() && !b.leads());

    proxy.cut(how);
    let cut = Instant::now();
    // a's last successful renewal was sent before the cut, so its deadline
    // falls at most a renew deadline after it.
    let a_stops = a.until(false, RENEW + SLACK).await;
    let b_leads = b.until(true, LEASE + 2 * RETRY + SLACK).await;
    eprintln!(
        "{how:?}: a stepped down {:?} after the cut, b led {:?} after the cut, {:?} after a stepped down",
        a_stops - cut,
        b_leads - cut,
        b_leads.saturating_duration_since(a_stops),
    );
    assert!(a_stops < b_leads, "a stepped down only after b took over");
    assert_never_both(&a, &b);

    // Cut off, a stays a standby.
    tokio::time::sleep(LEASE).await;
    assert!(!a.leads() && b.leads());
    let spec = lease_spec(&client, &namespace).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    a.task.abort();
    b.task.abort();
}

#[tokio::test]
async fn a_partitioned_leader_should_step_down_before_a_standby_leads() {
    cut_off_leader_steps_down_before_a_standby_leads(Cut::Hang).await;
}

#[tokio::test]
async fn a_leader_with_a_dead_api_address_should_step_down_before_a_standby_leads() {
    cut_off_leader_steps_down_before_a_standby_leads(Cut::Refuse).await;
}

#[tokio::test]
async fn a_leader_whose_lease_is_taken_should_step_down_before_it_would_expire() {
    let (client, namespace) = setup("leader-stolen").await;
    let mut a = start(client.clone(), &namespace, "a");
    a.until(true, 10 * LEASE).await;

    // Someone writes the Lease behind a's back, claiming it for themselves.
    let leases = Api::<Lease>::namespaced(client.clone(), &namespace);
    let mut lease = leases.get(NAME).await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("thief".to_owned());
    spec.renew_time = Some(MicroTime(Timestamp::now()));
    let stolen = Instant::now();
    leases.replace(NAME, &PostParams::default(), &lease).await.unwrap();

    // Its next renewal conflicts; at the latest its renew deadline passes.
    let a_stops = a.until(false, RENEW).await;
    eprintln!("stolen: a stepped down {:?} after the theft", a_stops - stolen);

    // The thief never renews: a takes the Lease back once the thief's record
    // has stood unchanged for a lease duration, by a's clock.
    let back = a.until(true, LEASE + RETRY + SLACK).await;
    eprintln!("stolen: a led again {:?} after the theft", back - stolen);
    assert!(back - stolen >= LEASE, "a took it back before the thief's lease expired");
    let spec = lease_spec(&client, &namespace).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_transitions, Some(1));
    a.task.abort();
}
