//! Talking to the API server: one line for a client error, and clients
//! that act as someone else. The bottom floor: every module that calls the
//! API server may use it; it uses none of them.

/// One line for a client error: the API server's message with its code and
/// reason, once (kube's own Display repeats the whole status).
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(s) => {
            let mut message: String = s.message.chars().take(600).collect();
            if message.len() < s.message.len() {
                message.push('…');
            }
            if s.reason.is_empty() {
                format!("{message} ({})", s.code)
            } else {
                format!("{message} ({} {})", s.code, s.reason)
            }
        }
        other => {
            let text = other.to_string();
            text.chars().take(600).collect()
        }
    }
}
