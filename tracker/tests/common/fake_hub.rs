//! A loopback HTTP server that answers as the Hugging Face hub does for model downloads, so
//! tests point `HF_ENDPOINT` at it instead of the internet.
//!
//! It serves what hf-hub 0.4's blocking client asks for:
//! - `GET /api/models/{owner}/{name}/revision/{rev}`: the repository info, JSON
//!   `{"id", "sha", "siblings": [{"rfilename"}]}`; an unknown repository is a 404 with
//!   `X-Error-Code: RepoNotFound`.
//! - `GET /{owner}/{name}/resolve/{rev}/{file}` with `Range: bytes=0-0` (the metadata probe)
//!   and then `Range: bytes={start}-` (the download, resumable): small files directly, with
//!   `ETag`, `X-Repo-Commit` and `Content-Range`; weight files (`.safetensors`, `.pt`) as the
//!   hub serves large files, a `302` to another URL with `X-Linked-Etag`, `X-Repo-Commit` and
//!   `X-Linked-Size`, whose answer carries the bytes and `Content-Range`. A missing file is a
//!   404 with `X-Error-Code: EntryNotFound`; a repository with a token needs
//!   `Authorization: Bearer {token}` for its files (401 `GatedRepo` otherwise).
//!
//! Every request is logged (`requests()`), one connection per request (`Connection: close`).
//! Used by `tracker/tests/hub.rs`, the CLI test (`tests/cli.rs`) and the element's
//! `plugins/tests/hub_model.rs` (those two through `#[path]`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The variables that would send hf-hub's requests elsewhere (its HTTP client goes through a
/// proxy from these and has no `NO_PROXY`, even for loopback) or change what it sends and reads
/// (a token, offline mode, another cache): a test clears them all, then sets what it means to.
pub const HUB_ENV: &[&str] = &[
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HF_TOKEN_PATH",
    "HF_HUB_OFFLINE",
    "HF_HUB_CACHE",
    "ALL_PROXY",
    "all_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
];

/// One repository: its files and, for a gated one, the token its files need.
#[derive(Clone)]
pub struct FakeRepo {
    pub id: String,
    pub files: Vec<(String, Arc<Vec<u8>>)>,
    pub token: Option<String>,
}

impl FakeRepo {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.into(),
            files: Vec::new(),
            token: None,
        }
    }

    pub fn file(mut self, name: &str, bytes: Vec<u8>) -> Self {
        self.files.push((name.into(), Arc::new(bytes)));
        self
    }

    pub fn gated(mut self, token: &str) -> Self {
        self.token = Some(token.into());
        self
    }

    /// A 40-hex commit id derived from the repository id and its files.
    fn commit(&self) -> String {
        let mut h = fnv(self.id.as_bytes());
        for (name, bytes) in &self.files {
            h ^= fnv(name.as_bytes()).rotate_left(7) ^ bytes.len() as u64;
        }
        format!("{h:016x}{:016x}{:08x}", h.rotate_left(21), h as u32)
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A file's ETag: content hash and size (the hub uses the sha256 of large files).
fn etag(bytes: &[u8]) -> String {
    format!("{:016x}{:016x}", fnv(bytes), bytes.len())
}

struct Shared {
    repos: HashMap<String, FakeRepo>,
    log: Mutex<Vec<String>>,
    stop: AtomicBool,
}

/// The running server; stopped (and its port closed) by [`FakeHub::stop`] or on drop.
pub struct FakeHub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl FakeHub {
    pub fn start(repos: Vec<FakeRepo>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            repos: repos.into_iter().map(|r| (r.id.clone(), r)).collect(),
            log: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    // One at a time: the client makes one request at a time.
                    let _ = serve(&s, addr, stream);
                }
            }
        });
        Self {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// What `HF_ENDPOINT` is set to.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `"GET /path"` per request so far.
    pub fn requests(&self) -> Vec<String> {
        self.shared
            .log
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(t) = self.thread.take() {
            self.shared.stop.store(true, Ordering::SeqCst);
            // Wake the blocking accept.
            let _ = TcpStream::connect(self.addr);
            let _ = t.join();
        }
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.shutdown();
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Arc<Vec<u8>>,
}

impl Answer {
    fn error(status: u16, code: &str, message: &str) -> Self {
        Self {
            status,
            headers: vec![
                ("X-Error-Code".into(), code.into()),
                ("Content-Type".into(), "application/json".into()),
            ],
            body: Arc::new(format!("{{\"error\":\"{message}\"}}").into_bytes()),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Bad Request",
    }
}

fn serve(s: &Shared, addr: SocketAddr, stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next()) {
        (Some(m), Some(t)) => (m.to_owned(), t.to_owned()),
        _ => return Ok(()),
    };
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    if let Ok(mut log) = s.log.lock() {
        log.push(format!("{method} {target}"));
    }
    let answer = route(s, addr, &target, &headers);
    let mut out = stream;
    let mut head = format!("HTTP/1.1 {} {}\r\n", answer.status, reason(answer.status));
    for (k, v) in &answer.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        answer.body.len()
    ));
    out.write_all(head.as_bytes())?;
    if method != "HEAD" {
        out.write_all(&answer.body)?;
    }
    out.flush()
}

fn route(s: &Shared, addr: SocketAddr, target: &str, headers: &HashMap<String, String>) -> Answer {
    let path = target.split('?').next().unwrap_or("");
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api", "models", owner, name, "revision", _rev] => {
            let Some(repo) = s.repos.get(&format!("{owner}/{name}")) else {
                return Answer::error(404, "RepoNotFound", "Repository not found");
            };
            let siblings: Vec<String> = repo
                .files
                .iter()
                .map(|(f, _)| format!("{{\"rfilename\":\"{f}\"}}"))
                .collect();
            Answer {
                status: 200,
                headers: vec![("Content-Type".into(), "application/json".into())],
                body: Arc::new(
                    format!(
                        "{{\"id\":\"{}\",\"modelId\":\"{}\",\"sha\":\"{}\",\"private\":false,\"siblings\":[{}]}}",
                        repo.id,
                        repo.id,
                        repo.commit(),
                        siblings.join(",")
                    )
                    .into_bytes(),
                ),
            }
        }
        [owner, name, "resolve", _rev, file @ ..] => {
            let Some(repo) = s.repos.get(&format!("{owner}/{name}")) else {
                return Answer::error(404, "RepoNotFound", "Repository not found");
            };
            if let Some(token) = &repo.token {
                if headers.get("authorization") != Some(&format!("Bearer {token}")) {
                    return Answer::error(401, "GatedRepo", "Access to this model is restricted");
                }
            }
            let file = file.join("/");
            let Some((_, bytes)) = repo.files.iter().find(|(f, _)| *f == file) else {
                return Answer::error(404, "EntryNotFound", "Entry not found");
            };
            let commit = repo.commit();
            if file.ends_with(".safetensors") || file.ends_with(".pt") {
                // Large files: the hub answers with a redirect to its storage.
                return Answer {
                    status: 302,
                    headers: vec![
                        (
                            "Location".into(),
                            format!("http://{addr}/storage/{}/{file}", repo.id),
                        ),
                        ("X-Repo-Commit".into(), commit),
                        ("X-Linked-Etag".into(), format!("\"{}\"", etag(bytes))),
                        ("X-Linked-Size".into(), bytes.len().to_string()),
                        ("ETag".into(), "\"pointer-file\"".into()),
                    ],
                    body: Arc::new(Vec::new()),
                };
            }
            let mut answer = ranged(bytes, headers);
            answer.headers.push(("X-Repo-Commit".into(), commit));
            answer
        }
        ["storage", owner, name, file @ ..] => {
            let Some(repo) = s.repos.get(&format!("{owner}/{name}")) else {
                return Answer::error(404, "NoSuchKey", "no such object");
            };
            let file = file.join("/");
            match repo.files.iter().find(|(f, _)| *f == file) {
                Some((_, bytes)) => ranged(bytes, headers),
                None => Answer::error(404, "NoSuchKey", "no such object"),
            }
        }
        _ => Answer::error(404, "NotFound", "no such route"),
    }
}

/// The file, or the part a `Range: bytes=a-b` / `bytes=a-` header asks for.
fn ranged(bytes: &Arc<Vec<u8>>, headers: &HashMap<String, String>) -> Answer {
    let total = bytes.len();
    let mut hs = vec![
        ("ETag".to_string(), format!("\"{}\"", etag(bytes))),
        ("Accept-Ranges".to_string(), "bytes".to_string()),
    ];
    let Some(range) = headers.get("range").and_then(|r| r.strip_prefix("bytes=")) else {
        return Answer {
            status: 200,
            headers: hs,
            body: bytes.clone(),
        };
    };
    let (a, b) = range.split_once('-').unwrap_or((range, ""));
    let start: usize = a.parse().unwrap_or(0);
    let end: usize = b
        .parse()
        .map(|e: usize| e.min(total.saturating_sub(1)))
        .unwrap_or(total.saturating_sub(1));
    if start >= total || start > end {
        hs.push(("Content-Range".into(), format!("bytes */{total}")));
        return Answer {
            status: 416,
            headers: hs,
            body: Arc::new(Vec::new()),
        };
    }
    hs.push((
        "Content-Range".into(),
        format!("bytes {start}-{end}/{total}"),
    ));
    Answer {
        status: 206,
        headers: hs,
        body: Arc::new(bytes[start..=end].to_vec()),
    }
}
