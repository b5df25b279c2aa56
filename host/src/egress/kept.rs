//! What one reconcile's egress keeps of its calls, for a recording and
//! for the shadow candidate's replay: bounded, whatever the guest does.
//!
//! A guest may loop on calls that are refused at once; if each kept its
//! request, one reconcile could hold gigabytes. So a refused call keeps no
//! body, the kept bytes and the number of exchanges are capped, and what
//! is kept is handed on once, shared ([`Recorded`]), never copied for the
//! shadow. A reconcile whose calls were not kept in full is marked
//! incomplete: it is not recorded, and its shadow comparison is skipped
//! (a replay of a partial record would differ for no fault of the
//! candidate).

use crate::contract::egress::{Exchange, HttpError, HttpRequest, HttpResponse};
use std::sync::Arc;

/// Exchanges kept per reconcile at most.
pub const MAX_EXCHANGES: usize = 64;

/// One reconcile's kept exchanges.
#[derive(Debug, Default)]
pub struct Kept {
    exchanges: Vec<Exchange>,
    bytes: usize,
    complete: bool,
    /// Crossings not kept (over a cap).
    dropped: u64,
}

/// The exchanges of a finished reconcile, shared by the recording and the
/// shadow replay.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The calls and their answers, in order.
    pub exchanges: Arc<[Exchange]>,
    /// Whether every call was kept whole (else: not recorded, no shadow
    /// comparison).
    pub complete: bool,
    /// Crossings that were not kept.
    pub dropped: u64,
}

impl Kept {
    /// Nothing kept yet.
    pub fn new() -> Kept {
        Kept { complete: true, ..Kept::default() }
    }

    /// Keep one call and its answer within `max_bytes`: a refused call
    /// (denied, invalid, over the budget) without its body.
    pub fn keep(&mut self, mut request: HttpRequest, answer: &Result<HttpResponse, HttpError>, max_bytes: usize) {
        let refused = matches!(
            answer,
            Err(HttpError::Denied(_) | HttpError::Invalid(_) | HttpError::Budget(_) | HttpError::NotRecorded(_))
        );
        if refused && request.body.take().is_some() {
            // The replay would not find this call without its body.
            self.complete = false;
        }
        let size = request_size(&request) + answer.as_ref().map_or_else(|e| e.to_string().len(), response_size);
        if self.exchanges.len() >= MAX_EXCHANGES || self.bytes + size > max_bytes {
            self.complete = false;
            self.dropped += 1;
            return;
        }
        self.bytes += size;
        self.exchanges.push(Exchange::of(request, answer));
    }

    /// Bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// What was kept, handed on (the call is over).
    pub fn take(&mut self) -> Recorded {
        let exchanges = std::mem::take(&mut self.exchanges);
        let recorded = Recorded { exchanges: exchanges.into(), complete: self.complete, dropped: self.dropped };
        self.bytes = 0;
        recorded
    }
}

fn request_size(r: &HttpRequest) -> usize {
    r.method.len()
        + r.url.len()
        + r.headers.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>()
        + r.body.as_ref().map_or(0, Vec::len)
        + r.credential.as_ref().map_or(0, String::len)
}

fn response_size(r: &HttpResponse) -> usize {
    r.headers.iter().map(|(n, v)| n.len() + v.len()).sum::<usize>() + r.body.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_calls_should_keep_no_body_and_the_kept_bytes_should_stay_under_the_cap() {
        let mut kept = Kept::new();
        let big = HttpRequest::post("https://a.example/x").body(vec![b'x'; 1 << 20]);
        for _ in 0..1000 {
            kept.keep(big.clone(), &Err(HttpError::Budget("spent".into())), 4 << 20);
        }
        assert!(kept.bytes() < 64 << 10, "kept {} bytes of refused calls", kept.bytes());
        let ok = Ok(HttpResponse { status: 200, headers: vec![], body: vec![b'y'; 1 << 20] });
        let mut kept = Kept::new();
        for _ in 0..10 {
            kept.keep(HttpRequest::get("https://a.example/"), &ok, 4 << 20);
        }
        assert!(kept.bytes() <= 4 << 20);
        let recorded = kept.take();
        assert_eq!(recorded.exchanges.len(), 3, "three answers of 1 MiB fit in 4 MiB");
        assert!(!recorded.complete && recorded.dropped == 7);
    }
}
