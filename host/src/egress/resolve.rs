//! Name resolution for egress, bounded in threads and in time.
//!
//! The system resolver blocks a thread per lookup (tokio's `lookup_host`
//! runs `getaddrinfo` on the blocking pool), and a slow DNS server keeps
//! that thread long after the caller gave up. So every egress lookup — the
//! check before a call and the connection's own ([`PublicOnly`]) — goes
//! through [`Lookups`]: at most [`MAX_LOOKUPS`] threads resolve at once,
//! a lookup holds its place until its thread is done (not until its caller
//! gave up), and a caller waits for a place or an answer only until its
//! call's end.

use super::grants::Allowed;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// Threads that may resolve names for egress at once, host-wide.
pub const MAX_LOOKUPS: usize = 8;

/// How long the connection's own lookup may take (the call's timeout
/// bounds it too).
const CONNECT_LOOKUP: Duration = Duration::from_secs(5);

/// Why a name was not resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No answer by the call's end (or every resolver thread was busy).
    #[error("{0}: not resolved in the call's time (the DNS server is slow, or the host's resolver is busy)")]
    Late(String),
    /// The resolver answered with an error.
    #[error("{name}: {reason}")]
    Failed {
        /// The name.
        name: String,
        /// The resolver's error.
        reason: String,
    },
    /// Every address of the name is special ([`Allowed::special`]).
    #[error("{name} resolves only to addresses a name may not reach ({shown})")]
    Special {
        /// The name.
        name: String,
        /// Its addresses.
        shown: String,
    },
}

/// The function that resolves (the system's `getaddrinfo`, or a test's).
pub type Resolver = fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>;

/// Lookups bounded in threads: see the module's doc.
pub struct Lookups {
    places: Arc<Semaphore>,
    resolver: Resolver,
}

impl Lookups {
    /// At most `max` lookups on threads at once, through `resolver`.
    pub fn new(max: usize, resolver: Resolver) -> Lookups {
        Lookups { places: Arc::new(Semaphore::new(max.max(1))), resolver }
    }

    /// The host's: the system resolver, [`MAX_LOOKUPS`] threads.
    pub fn system() -> &'static Lookups {
        static LOOKUPS: OnceLock<Lookups> = OnceLock::new();
        LOOKUPS.get_or_init(|| {
            Lookups::new(MAX_LOOKUPS, |name, port| {
                use std::net::ToSocketAddrs as _;
                (name, port).to_socket_addrs().map(Iterator::collect)
            })
        })
    }

    /// The addresses of `name`, by `end`.
    ///
    /// # Errors
    /// [`Error::Late`] past `end`, [`Error::Failed`] for the resolver's
    /// error.
    pub async fn resolve(&self, name: &str, port: u16, end: Instant) -> Result<Vec<SocketAddr>, Error> {
        let late = || Error::Late(name.to_string());
        let end = tokio::time::Instant::from_std(end);
        let place = tokio::time::timeout_at(end, self.places.clone().acquire_owned())
            .await
            .map_err(|_| late())?
            .map_err(|_| late())?;
        let resolver = self.resolver;
        let owned = name.to_string();
        // The place goes with the thread: given back when the lookup ends,
        // however long after its caller stopped waiting.
        let lookup = tokio::task::spawn_blocking(move || {
            let _place = place;
            resolver(&owned, port)
        });
        match tokio::time::timeout_at(end, lookup).await {
            Err(_) => Err(late()),
            Ok(Err(join)) => Err(Error::Failed { name: name.to_string(), reason: join.to_string() }),
            Ok(Ok(Err(e))) => Err(Error::Failed { name: name.to_string(), reason: e.to_string() }),
            Ok(Ok(Ok(found))) => Ok(found),
        }
    }
}

/// Resolves names for the egress client, keeping only public addresses:
/// whatever a name answers when the connection is made, nothing special is
/// reached through it (DNS rebinding gets nowhere).
#[derive(Debug, Clone)]
pub struct PublicOnly {
    /// What is special on this host (the cluster's ranges included).
    pub allowed: Arc<Allowed>,
}

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.allowed.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let end = Instant::now() + CONNECT_LOOKUP;
            let found = Lookups::system().resolve(&host, 0, end).await.map_err(boxed)?;
            let public: Vec<SocketAddr> = found.iter().copied().filter(|a| allowed.special(a.ip()).is_none()).collect();
            if public.is_empty() {
                let shown: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                return Err(boxed(Error::Special { name: host, shown: shown.join(", ") }));
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

fn boxed(e: Error) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::dns::Resolve as _;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
    static MOST: AtomicUsize = AtomicUsize::new(0);

    fn slow(_: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        let now = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) + 1;
        MOST.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        Ok(vec![SocketAddr::from(([93, 184, 216, 34], port))])
    }

    /// Behind a slow DNS server, callers give up at their calls' end and
    /// the threads resolving for them stay bounded: fifty lookups that
    /// each wait 50 ms never have more than four threads blocked at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lookups_behind_a_slow_dns_should_stay_bounded_in_threads_and_time() {
        let lookups = Arc::new(Lookups::new(4, slow));
        let started = Instant::now();
        let calls: Vec<_> = (0..50)
            .map(|i| {
                let lookups = lookups.clone();
                tokio::spawn(async move {
                    lookups.resolve(&format!("n{i}.example"), 443, Instant::now() + Duration::from_millis(50)).await
                })
            })
            .collect();
        for call in calls {
            let answer = call.await.unwrap();
            assert!(matches!(answer, Err(Error::Late(_))), "{answer:?}");
        }
        assert!(started.elapsed() < Duration::from_secs(1), "callers waited {:?}", started.elapsed());
        assert!(MOST.load(Ordering::SeqCst) <= 4, "{} threads resolved at once", MOST.load(Ordering::SeqCst));
        // Given time, a lookup is answered.
        let found = lookups.resolve("ok.example", 443, Instant::now() + Duration::from_secs(5)).await.unwrap();
        assert_eq!(found, vec![SocketAddr::from(([93, 184, 216, 34], 443))]);
    }

    /// The resolver the connection uses refuses a name whose every address
    /// is special, whatever answered an earlier lookup (rebinding).
    #[tokio::test]
    async fn the_connection_resolver_should_refuse_names_of_special_addresses() {
        let resolver = PublicOnly { allowed: Arc::new(Allowed::public()) };
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let refused = match resolver.resolve(name).await {
            Err(e) => e.to_string(),
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
        };
        assert!(refused.contains("localhost resolves only to addresses a name may not reach"), "{refused}");
    }
}
