//! A module served over HTTP on loopback, for tests and benchmarks of
//! `spec.source.url` (included with `#[path]` by `tests/reconcilers.rs` and
//! `benches/fleet.rs`).

/// Serve `bytes` at `http://127.0.0.1:PORT/module.wasm` (a minimal HTTP/1.1
/// server, one response per connection).
pub async fn serve_module(bytes: Vec<u8>) -> String {
    serve_module_slowly(bytes, std::time::Duration::ZERO).await
}

/// [`serve_module`], answering each request only after `delay` (a slow
/// registry or CDN).
pub async fn serve_module_slowly(bytes: Vec<u8>, delay: std::time::Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                tokio::time::sleep(delay).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/wasm\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    bytes.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&bytes).await;
            });
        }
    });
    format!("http://{addr}/module.wasm")
}
