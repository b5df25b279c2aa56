use super::*;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(15);
const RENEW: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(2);

fn config(identity: &str) -> Config {
    Config { identity: identity.to_owned(), ..Config::new("operon-system", "operon") }
}

fn held_by(holder: &str, renewed: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_owned()),
        lease_duration_seconds: Some(15),
        acquire_time: Some(MicroTime(renewed)),
        renew_time: Some(MicroTime(renewed)),
        lease_transitions: Some(3),
        ..LeaseSpec::default()
    }
}

fn seen(spec: LeaseSpec, at: Instant) -> Option<Observed> {
    Some(Observed { spec, at })
}

// --- The decision, given what was observed and when ---

#[test]
fn a_missing_lease_should_be_created() {
    assert_eq!(decide(None, "me", LEASE, Instant::now()), Action::Create);
}

#[test]
fn a_released_lease_should_be_taken_at_once() {
    let now = Instant::now();
    let released = released_spec(Some(&held_by("other", Timestamp::now())), Timestamp::now());
    assert_eq!(decide(seen(released, now).as_ref(), "me", LEASE, now), Action::Acquire);
}

#[test]
fn our_own_lease_should_be_renewed_even_if_we_saw_it_long_ago() {
    let then = Instant::now();
    let observed = seen(held_by("me", Timestamp::now()), then);
    assert_eq!(decide(observed.as_ref(), "me", LEASE, then + LEASE * 10), Action::Renew);
}

#[tokio::test(start_paused = true)]
async fn a_held_lease_should_expire_a_lease_duration_after_it_was_seen_to_change() {
    let first_seen = Instant::now();
    let spec = held_by("other", Timestamp::now());
    let mut observed = Observed::update(None, spec.clone(), first_seen);

    tokio::time::advance(LEASE - Duration::from_millis(1)).await;
    observed = Observed::update(Some(observed), spec, Instant::now());
    assert_eq!(
        decide(Some(&observed), "me", LEASE, Instant::now()),
        Action::Wait { holder: "other".to_owned(), expires: first_seen + LEASE },
        "an unchanged record keeps the time it was first seen"
    );

    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(decide(Some(&observed), "me", LEASE, Instant::now()), Action::Acquire);
}

#[tokio::test(start_paused = true)]
async fn a_renewal_seen_should_restart_the_wait() {
    let mut observed = Observed::update(None, held_by("other", Timestamp::now()), Instant::now());
    tokio::time::advance(LEASE - RETRY).await;
    let renewed = held_by("other", Timestamp::now() + Duration::from_secs(1));
    observed = Observed::update(Some(observed), renewed, Instant::now());
    tokio::time::advance(RETRY).await;
    assert!(
        matches!(decide(Some(&observed), "me", LEASE, Instant::now()), Action::Wait { .. }),
        "the wait counts from the renewal we saw, not from the first record"
    );
}

#[test]
fn a_renew_time_from_a_skewed_clock_should_not_shorten_the_wait() {
    // The holder's clock says it renewed long ago; we just saw the record.
    let now = Instant::now();
    let long_ago = Timestamp::UNIX_EPOCH;
    let observed = seen(held_by("other", long_ago), now);
    assert!(matches!(
        decide(observed.as_ref(), "me", LEASE, now + LEASE - Duration::from_millis(1)),
        Action::Wait { .. }
    ));
}

#[test]
fn a_record_without_a_duration_should_get_ours() {
    let now = Instant::now();
    let spec = LeaseSpec { lease_duration_seconds: None, ..held_by("other", Timestamp::now()) };
    let observed = seen(spec, now);
    assert!(matches!(decide(observed.as_ref(), "me", LEASE, now + RENEW), Action::Wait { .. }));
    assert_eq!(decide(observed.as_ref(), "me", LEASE, now + LEASE), Action::Acquire);
}

// --- The records written ---

#[test]
fn taking_over_should_count_a_transition_and_renewing_should_not() {
    let before = Timestamp::now();
    let now = before + Duration::from_secs(20);
    let current = held_by("other", before);

    let taken = next_spec(&Action::Acquire, Some(&current), &config("me"), now);
    assert_eq!(taken.holder_identity.as_deref(), Some("me"));
    assert_eq!(taken.lease_transitions, Some(4));
    assert_eq!(taken.acquire_time, Some(MicroTime(now)));
    assert_eq!(taken.lease_duration_seconds, Some(15));

    let later = now + Duration::from_secs(2);
    let renewed = next_spec(&Action::Renew, Some(&taken), &config("me"), later);
    assert_eq!(renewed.lease_transitions, Some(4));
    assert_eq!(renewed.acquire_time, Some(MicroTime(now)));
    assert_eq!(renewed.renew_time, Some(MicroTime(later)));

    let created = next_spec(&Action::Create, None, &config("me"), now);
    assert_eq!(created.lease_transitions, Some(0));
}

#[test]
fn a_release_should_clear_the_holder_and_keep_the_count() {
    let released = released_spec(Some(&held_by("me", Timestamp::now())), Timestamp::now());
    assert_eq!(released.holder_identity, None);
    assert_eq!(released.lease_transitions, Some(3));
    assert_eq!(released.lease_duration_seconds, Some(1));
}

// --- Configuration ---

#[test]
fn the_defaults_should_be_client_gos_and_valid() {
    let config = Config::new("ns", "name");
    assert_eq!((config.lease_duration, config.renew_deadline, config.retry_period), (LEASE, RENEW, RETRY));
    config.validate().unwrap();
    assert_ne!(config.identity, Config::new("ns", "name").identity, "identities are unique");
}

#[test]
fn timings_that_would_let_two_lead_should_be_rejected() {
    let cases = [(LEASE, LEASE, RETRY), (LEASE, RENEW, RENEW), (LEASE, RENEW, Duration::ZERO)];
    for (lease_duration, renew_deadline, retry_period) in cases {
        let config = Config { lease_duration, renew_deadline, retry_period, ..config("me") };
        assert!(
            matches!(config.validate(), Err(Error::Timings { .. })),
            "{lease_duration:?} {renew_deadline:?} {retry_period:?}"
        );
    }
    let fractional = Config { lease_duration: Duration::from_millis(15_500), ..config("me") };
    assert!(matches!(fractional.validate(), Err(Error::LeaseDuration(_))));
    let nameless = Config { name: String::new(), ..config("me") };
    assert!(matches!(nameless.validate(), Err(Error::Empty { field: "name" })));
}

// --- The loop, against a fake API server, in virtual time ---

/// An in-memory Lease store shared by handles, each of which can be cut
/// off: its requests then hang, as through a network partition.
#[derive(Clone, Default)]
struct Fake {
    store: Arc<Mutex<Store>>,
    cut: Arc<AtomicBool>,
}

#[derive(Default)]
struct Store {
    lease: Option<Lease>,
    version: u64,
}

impl Fake {
    /// Another client of the same store, with its own connection.
    fn client(&self) -> Fake {
        Fake { store: self.store.clone(), cut: Arc::default() }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    async fn network(&self) {
        if self.cut.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    fn lease(&self) -> Lease {
        self.store.lock().unwrap().lease.clone().expect("a lease")
    }

    /// Writes unconditionally, as a human with kubectl might.
    fn overwrite(&self, spec: LeaseSpec) {
        let mut store = self.store.lock().unwrap();
        store.version += 1;
        let version = store.version.to_string();
        let lease = store.lease.as_mut().expect("a lease");
        lease.spec = Some(spec);
        lease.metadata.resource_version = Some(version);
    }

    fn write(store: &mut Store, lease: &Lease) -> Lease {
        store.version += 1;
        let mut lease = lease.clone();
        lease.metadata.resource_version = Some(store.version.to_string());
        store.lease = Some(lease.clone());
        lease
    }
}

fn conflict() -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        code: 409,
        reason: "Conflict".to_owned(),
        ..kube::core::Status::default()
    }))
}

impl Leases for Fake {
    async fn read(&self, _name: &str) -> kube::Result<Option<Lease>> {
        self.network().await;
        Ok(self.store.lock().unwrap().lease.clone())
    }

    async fn insert(&self, lease: &Lease) -> kube::Result<Lease> {
        self.network().await;
        let mut store = self.store.lock().unwrap();
        if store.lease.is_some() {
            return Err(conflict());
        }
        Ok(Self::write(&mut store, lease))
    }

    async fn update(&self, _name: &str, lease: &Lease) -> kube::Result<Lease> {
        self.network().await;
        let mut store = self.store.lock().unwrap();
        let current = store.lease.as_ref().and_then(|l| l.metadata.resource_version.clone());
        if current != lease.metadata.resource_version {
            return Err(conflict());
        }
        Ok(Self::write(&mut store, lease))
    }
}

/// A running elector: its channel, and ways to stop it.
struct Candidate {
    leading: watch::Receiver<bool>,
    task: JoinHandle<()>,
    stop: Option<oneshot::Sender<()>>,
}

fn start(leases: Fake, identity: &str) -> Candidate {
    run(Elector::new(leases, config(identity)))
}

/// Run `elector` until its candidate's `stop` is sent.
fn run(elector: Elector<Fake>) -> Candidate {
    let leading = elector.leading.subscribe();
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(elector.run(async move {
        let _ = stopped.await;
    }));
    Candidate { leading, task, stop: Some(stop) }
}

impl Candidate {
    fn leads(&self) -> bool {
        *self.leading.borrow()
    }

    /// Waits for the channel to say `leading`; returns when, in virtual
    /// time.
    async fn until(&mut self, leading: bool) -> Instant {
        self.leading.wait_for(|now| *now == leading).await.unwrap();
        Instant::now()
    }
}

#[tokio::test(start_paused = true)]
async fn a_lone_elector_should_create_the_lease_and_lead_at_once() {
    let fake = Fake::default();
    let start_at = Instant::now();
    let mut a = start(fake.client(), "a");
    assert_eq!(a.until(true).await, start_at);
    let spec = fake.lease().spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(spec.lease_transitions, Some(0));
}

#[tokio::test(start_paused = true)]
async fn two_electors_should_never_lead_at_once() {
    let fake = Fake::default();
    let mut a = start(fake.client(), "a");
    let b = start(fake.client(), "b");
    a.until(true).await;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(a.leads() && !b.leads(), "a took it first and keeps renewing");
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_leader_should_step_down_at_the_renew_deadline_and_before_a_standby_leads() {
    let fake = Fake::default();
    let a_network = fake.client();
    let mut a = start(a_network.clone(), "a");
    let started = a.until(true).await;
    let mut b = start(fake.client(), "b");

    // a renews at +0, +2, +4; cut at +5, its renewal at +6 hangs.
    tokio::time::sleep(Duration::from_secs(5)).await;
    a_network.cut();
    let last_renewal = started + Duration::from_secs(4);

    let stepped_down = a.until(false).await;
    assert_eq!(stepped_down, last_renewal + RENEW, "the hanging request did not delay it");
    let b_leads = b.until(true).await;
    assert!(
        b_leads >= stepped_down + (LEASE - RENEW),
        "b must wait out the lease it saw renewed at +4 or later: stepped down {:?}, b leads {:?}",
        stepped_down - started,
        b_leads - started
    );
    assert!(b_leads <= last_renewal + LEASE + 2 * RETRY);
    assert_eq!(fake.lease().spec.unwrap().lease_transitions, Some(1));
    assert!(!a.leads());
}

#[tokio::test(start_paused = true)]
async fn a_killed_leader_should_be_replaced_after_the_lease_duration() {
    let fake = Fake::default();
    let mut a = start(fake.client(), "a");
    let started = a.until(true).await;
    let mut b = start(fake.client(), "b");
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.task.abort();
    let killed = Instant::now();

    let b_leads = b.until(true).await;
    // a last renewed at +2; b saw that at +2 (same instant) or at its next look.
    let last_renewal = started + Duration::from_secs(2);
    assert!(b_leads >= last_renewal + LEASE, "b took over {:?} after the kill", b_leads - killed);
    assert!(b_leads <= last_renewal + LEASE + 2 * RETRY);
    assert_eq!(fake.lease().spec.unwrap().holder_identity.as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn shutdown_should_step_down_first_then_release_so_a_standby_leads_at_its_next_look() {
    let fake = Fake::default();
    let mut a = start(fake.client(), "a");
    a.until(true).await;
    let mut b = start(fake.client(), "b");
    tokio::time::sleep(Duration::from_secs(7)).await;

    let stopped_at = Instant::now();
    a.stop.take().unwrap().send(()).unwrap();
    assert_eq!(a.until(false).await, stopped_at);
    a.task.await.unwrap();
    assert_eq!(fake.lease().spec.unwrap().holder_identity, None, "released");

    let b_leads = b.until(true).await;
    assert!(b_leads <= stopped_at + RETRY, "b took {:?}", b_leads - stopped_at);
    assert_eq!(fake.lease().spec.unwrap().lease_transitions, Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_lease_is_taken_should_step_down_at_its_next_renewal() {
    let fake = Fake::default();
    let mut a = start(fake.client(), "a");
    let started = a.until(true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    fake.overwrite(held_by("thief", Timestamp::now()));

    let stepped_down = a.until(false).await;
    assert_eq!(stepped_down, started + 2 * RETRY, "at the renewal after the theft");
    // It stands by, then takes over at its first look after the thief's
    // record has stood unchanged for a lease duration.
    let back = a.until(true).await;
    assert!(back >= stepped_down + LEASE && back <= stepped_down + LEASE + RETRY);
    assert_eq!(fake.lease().spec.unwrap().lease_transitions, Some(4));
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_while_standing_by_should_leave_the_lease_alone() {
    let fake = Fake::default();
    let mut a = start(fake.client(), "a");
    a.until(true).await;
    let mut b = start(fake.client(), "b");
    tokio::time::sleep(RETRY).await;
    let before = fake.lease();
    b.stop.take().unwrap().send(()).unwrap();
    (&mut b.task).await.unwrap();
    assert!(!b.leads());
    assert!(a.leads());
    assert_eq!(fake.lease().spec.unwrap().holder_identity, before.spec.unwrap().holder_identity);
}

// --- A replica that cannot serve the unit ---

/// An elector told whether it can serve through `able`, sharing out
/// Leases with `gate` if given.
fn start_able(leases: Fake, identity: &str, able: watch::Receiver<Ability>, gate: Option<Arc<Shards>>) -> Candidate {
    let mut elector = Elector::new(leases, config(identity));
    elector.able = Some(able);
    elector.gate = gate;
    run(elector)
}

fn yielded_by(lease: &Lease) -> Option<String> {
    lease.metadata.annotations.as_ref()?.get(YIELDED_ANNOTATION).cloned()
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_serve_should_hand_the_lease_to_a_standby_that_can() {
    let fake = Fake::default();
    let (able, rx) = watch::channel(Ability::Ready);
    let mut a = start_able(fake.client(), "a", rx, None);
    a.until(true).await;
    let mut b = start(fake.client(), "b");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let unable_at = Instant::now();
    able.send_replace(Ability::Unable);

    let stepped_down = tokio::time::timeout(LEASE * 4, a.until(false)).await.expect("a handed the lease over");
    let held = stepped_down - unable_at;
    assert!(held >= LEASE && held <= LEASE + RETRY, "held {held:?} after it could not serve");
    let b_leads = b.until(true).await;
    assert!(b_leads <= stepped_down + RETRY, "b took {:?}", b_leads - stepped_down);
    assert_eq!(yielded_by(&fake.lease()), None, "the taker clears the mark");
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(b.leads() && !a.leads(), "the one that can serve keeps it");
    }
}

#[tokio::test(start_paused = true)]
async fn a_free_lease_should_go_to_the_replica_that_can_serve() {
    let fake = Fake::default();
    let (_able, rx) = watch::channel(Ability::Unable);
    let a = start_able(fake.client(), "a", rx, None);
    // a looks first and leaves it; b creates it at its first look.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut b = start(fake.client(), "b");
    tokio::time::timeout(RETRY, b.until(true)).await.expect("b creates it at once");
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(b.leads() && !a.leads());
    }
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_cannot_serve_should_still_lead_when_nobody_can() {
    let fake = Fake::default();
    let started = Instant::now();
    let (_able, rx) = watch::channel(Ability::Unable);
    let mut a = start_able(fake.client(), "a", rx, None);
    // Deferred by a lease duration (someone reports the unit's state).
    let leads = tokio::time::timeout(LEASE * 4, a.until(true)).await.expect("a leads");
    assert!(leads - started >= LEASE && leads - started <= LEASE + RETRY, "led after {:?}", leads - started);
    // Handed over (another replica might be live), marked, and taken back
    // after a deferral; the next hold is twice as long.
    let first_hand_over = tokio::time::timeout(LEASE * 4, a.until(false)).await.expect("a hands it over");
    assert_eq!(yielded_by(&fake.lease()).as_deref(), Some("a"));
    let back = a.until(true).await;
    assert!(back - first_hand_over >= LEASE && back - first_hand_over <= LEASE + RETRY);
    let second_hand_over = a.until(false).await;
    assert!(second_hand_over - back >= 2 * LEASE, "held {:?} the second time", second_hand_over - back);
}

#[tokio::test(start_paused = true)]
async fn a_lone_replica_that_cannot_serve_should_keep_its_lease() {
    let fake = Fake::default();
    let shards = Arc::new(Shards::default());
    shards.set_share(1, 1);
    let (_able, rx) = watch::channel(Ability::Unable);
    let mut a = start_able(fake.client(), "a", rx, Some(shards));
    a.until(true).await;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(a.leads(), "no other replica is live: nobody to hand it to");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_handed_over_should_be_taken_whatever_the_share() {
    let fake = Fake::default();
    let (able, rx) = watch::channel(Ability::Ready);
    let mut a = start_able(fake.client(), "a", rx, None);
    a.until(true).await;
    // b already holds its share (one Lease of two, two replicas).
    let shards = Arc::new(Shards::default());
    shards.set_share(2, 2);
    shards.acquired();
    let (_b_able, b_rx) = watch::channel(Ability::Ready);
    let mut b = start_able(fake.client(), "b", b_rx, Some(shards.clone()));
    tokio::time::sleep(RETRY * 3).await;
    assert!(!b.leads(), "a holds it");
    able.send_replace(Ability::Unable);
    let stepped_down = tokio::time::timeout(LEASE * 4, a.until(false)).await.expect("a hands it over");
    let b_leads = tokio::time::timeout(LEASE, b.until(true)).await.expect("b takes it beyond its share");
    assert!(b_leads <= stepped_down + RETRY);
    assert_eq!(shards.held(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_replica_over_its_share_should_hand_the_excess_to_one_under_it() {
    // Two Leases; replica a counted itself alone and took both.
    let (one, two) = (Fake::default(), Fake::default());
    let a_shards = Arc::new(Shards::default());
    a_shards.set_share(2, 1);
    let (_able, rx) = watch::channel(Ability::Ready);
    let mut a1 = start_able(one.client(), "a", rx.clone(), Some(a_shards.clone()));
    let mut a2 = start_able(two.client(), "a", rx.clone(), Some(a_shards.clone()));
    a1.until(true).await;
    a2.until(true).await;
    // b joins; both count two replicas: a share of one each.
    let b_shards = Arc::new(Shards::default());
    b_shards.set_share(2, 2);
    a_shards.set_share(2, 2);
    let joined = Instant::now();
    let mut b1 = start_able(one.client(), "b", rx.clone(), Some(b_shards.clone()));
    let mut b2 = start_able(two.client(), "b", rx.clone(), Some(b_shards.clone()));
    let handed = tokio::time::timeout(LEASE * 3, async {
        tokio::select! {
            at = a1.until(false) => at,
            at = a2.until(false) => at,
        }
    })
    .await
    .expect("a hands its excess over");
    assert!(handed - joined >= LEASE, "kept for a lease duration first: {:?}", handed - joined);
    tokio::time::timeout(RETRY * 2, async {
        tokio::select! {
            _ = b1.until(true) => {},
            _ = b2.until(true) => {},
        }
    })
    .await
    .expect("b takes it");
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            (a1.leads() as u8 + a2.leads() as u8, b1.leads() as u8 + b2.leads() as u8),
            (1, 1),
            "one each, and it stays so"
        );
    }
    assert_eq!((a_shards.held(), b_shards.held()), (1, 1));
}

// --- A replica still loading the unit's module ---

#[tokio::test(start_paused = true)]
async fn a_replica_still_loading_should_leave_a_handed_over_lease_to_a_warm_standby() {
    let fake = Fake::default();
    let mut a = start(fake.client(), "a");
    a.until(true).await;
    let mut b = start(fake.client(), "b");
    let (_c_able, c_rx) = watch::channel(Ability::Warming);
    let c = start_able(fake.client(), "c", c_rx, None);
    tokio::time::sleep(RETRY * 3).await;
    let stopped = Instant::now();
    a.stop.take().unwrap().send(()).unwrap();
    (&mut a.task).await.unwrap();
    let b_leads = tokio::time::timeout(RETRY * 2, b.until(true)).await.expect("the warm standby takes it");
    assert!(b_leads <= stopped + RETRY, "b took {:?}", b_leads - stopped);
    for _ in 0..4 * LEASE.as_secs() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(b.leads() && !c.leads(), "the warm standby keeps it");
    }
}

#[tokio::test(start_paused = true)]
async fn a_replica_still_loading_should_take_a_free_lease_nobody_else_takes() {
    // Another replica is live (it might be ready) but does not take it.
    let fake = Fake::default();
    let shards = Arc::new(Shards::default());
    shards.set_counts(1, 2, 1);
    let started = Instant::now();
    let (_able, rx) = watch::channel(Ability::Warming);
    let mut c = start_able(fake.client(), "c", rx, Some(shards));
    let leads = tokio::time::timeout(LEASE * 3, c.until(true)).await.expect("c takes it");
    assert!(leads - started >= LEASE && leads - started <= LEASE + RETRY, "took it after {:?}", leads - started);

    // Alone, at once.
    let fake = Fake::default();
    let alone = Arc::new(Shards::default());
    alone.set_counts(1, 1, 0);
    let started = Instant::now();
    let (_able, rx) = watch::channel(Ability::Warming);
    let mut d = start_able(fake.client(), "d", rx, Some(alone));
    assert_eq!(d.until(true).await, started, "the only replica takes it at once");
}

#[tokio::test(start_paused = true)]
async fn a_leader_loading_a_new_version_should_keep_its_lease() {
    let fake = Fake::default();
    let (able, rx) = watch::channel(Ability::Ready);
    let mut a = start_able(fake.client(), "a", rx, None);
    a.until(true).await;
    let b = start(fake.client(), "b");
    able.send_replace(Ability::Warming);
    for _ in 0..4 * LEASE.as_secs() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(a.leads() && !b.leads(), "warming is no reason to hand over");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_handed_over_on_shutdown_should_be_taken_beyond_the_share() {
    let fake = Fake::default();
    let mut a = start(fake.client(), "a");
    a.until(true).await;
    // b holds its share already (one Lease of two, two replicas).
    let shards = Arc::new(Shards::default());
    shards.set_share(2, 2);
    shards.acquired();
    let (_able, rx) = watch::channel(Ability::Ready);
    let mut b = Elector::new(fake.client(), config("b"));
    b.able = Some(rx);
    b.gate = Some(shards.clone());
    let took_b = b.took.subscribe();
    let mut b = run(b);
    tokio::time::sleep(RETRY * 3).await;
    let stopped = Instant::now();
    a.stop.take().unwrap().send(()).unwrap();
    (&mut a.task).await.unwrap();
    // As a left it, or as b took it at once (it was marked).
    let lease = fake.lease();
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
    if holder.is_empty() {
        assert_eq!(yielded_by(&lease).as_deref(), Some("a"), "marked as handed over");
    }
    let b_leads = tokio::time::timeout(RETRY * 2, b.until(true)).await.expect("b takes it beyond its share");
    assert!(b_leads <= stopped + RETRY);
    assert_eq!(shards.held(), 2);
    assert_eq!(
        *took_b.borrow(),
        Some(Takeover { from: Some("a".into()), how: Taken::HandedOver }),
        "marked as handed over"
    );
    assert_eq!(yielded_by(&fake.lease()), None, "the taker clears the mark");
}

#[tokio::test(start_paused = true)]
async fn a_take_over_should_say_from_whom_and_how() {
    let fake = Fake::default();
    let a = Elector::new(fake.client(), config("a"));
    let took_a = a.took.subscribe();
    let mut a = run(a);
    a.until(true).await;
    assert_eq!(took_a.borrow().as_ref().map(|t| t.how), Some(Taken::Created));
    let b = Elector::new(fake.client(), config("b"));
    let took_b = b.took.subscribe();
    let mut b = run(b);
    tokio::time::sleep(RETRY).await;
    a.stop.take().unwrap().send(()).unwrap();
    b.until(true).await;
    assert_eq!(*took_b.borrow(), Some(Takeover { from: Some("a".into()), how: Taken::HandedOver }));
    // Killed: its Lease expires.
    let c = Elector::new(fake.client(), config("c"));
    let took_c = c.took.subscribe();
    let mut c = run(c);
    tokio::time::sleep(RETRY).await;
    b.task.abort();
    c.until(true).await;
    assert_eq!(*took_c.borrow(), Some(Takeover { from: Some("b".into()), how: Taken::Expired }));
}

#[test]
fn the_identity_should_be_the_hostname_and_a_suffix_new_at_every_start() {
    let (one, two) = (default_identity(), default_identity());
    let (host, suffix) = one.rsplit_once('_').expect("HOSTNAME_<random>");
    assert!(!host.is_empty() && suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_hexdigit()), "{one}");
    assert_ne!(one, two, "a restarted process never shares its predecessor's identity");
}

#[tokio::test(start_paused = true)]
async fn a_release_should_follow_a_renewal_whose_answer_was_never_seen() {
    let fake = Fake::default();
    let mut a = start(fake.client(), "a");
    a.until(true).await;
    // Our renewal landed, but its answer was lost (cut short by the
    // shutdown): the Lease is still ours, at a version we never saw.
    fake.overwrite(fake.lease().spec.unwrap());
    a.stop.take().unwrap().send(()).unwrap();
    (&mut a.task).await.unwrap();
    let holder = fake.lease().spec.and_then(|s| s.holder_identity).unwrap_or_default();
    assert_eq!(holder, "", "released although our last write was not the last one");
}
