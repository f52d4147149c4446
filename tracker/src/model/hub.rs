//! Models named by Hugging Face hub repository id (`owner/name`) as well as by path.
//!
//! [`ModelSource::parse`] tells a local path from a repository id; [`ModelSource::resolve`]
//! turns either into the local path [`EdgeTam::load`](crate::EdgeTam::load) takes, fetching a
//! repository's files into the standard Hugging Face cache first (feature `hub`, through the
//! `hf-hub` crate). The cache is the one the Python tools share, laid out as
//! `models--{owner}--{name}/{blobs,refs,snapshots}`, so a model downloaded by either is found by
//! both.
//!
//! Environment, as Hugging Face's own tools read it:
//!
//! | variable | effect |
//! |---|---|
//! | `HF_HOME` | cache root (default `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`); files go to `$HF_HOME/hub`, the token file is `$HF_HOME/token` |
//! | `HF_HUB_CACHE` | the hub cache folder itself (overrides `$HF_HOME/hub`) |
//! | `HF_ENDPOINT` | the hub's base URL (a mirror, or a local server in tests) |
//! | `HF_TOKEN` | access token for private or gated repositories (else the token file) |
//! | `HF_HUB_OFFLINE` | `1` (or `true`/`yes`/`on`): never use the network, only the cache |

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{HubError, Result};

/// Where a model comes from: a local path or a model repository on the Hugging Face hub.
///
/// ```
/// use edgetam_tracker::ModelSource;
///
/// assert_eq!(
///     ModelSource::parse("yonigozlan/EdgeTAM-hf"),
///     ModelSource::Hub { repo: "yonigozlan/EdgeTAM-hf".into() }
/// );
/// assert!(matches!(ModelSource::parse("./models/edgetam"), ModelSource::Path(_)));
/// assert!(matches!(ModelSource::parse("checkpoints/edgetam.pt"), ModelSource::Path(_)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A folder with `config.json` + `model.safetensors`, or a checkpoint file such as
    /// `edgetam.pt`: what [`EdgeTam::load`](crate::EdgeTam::load) takes.
    Path(PathBuf),
    /// A model repository on the hub, `owner/name`, e.g. `yonigozlan/EdgeTAM-hf` (transformers
    /// layout: `config.json` + `model.safetensors`) or `facebook/EdgeTAM` (Meta's
    /// `edgetam.pt`).
    Hub {
        /// The repository id, `owner/name`.
        repo: String,
    },
}

impl ModelSource {
    /// Reads what a user typed (`--model`, the element's `model` property).
    ///
    /// How ambiguity is resolved: **a path that exists wins**. Otherwise the string is a hub
    /// repository id if it has the id's shape: exactly one `/` between an owner and a name made
    /// of ASCII letters, digits, `-`, `_` and `.` (neither starting nor ending with `-` or `.`,
    /// no `--` or `..`, at most 96 characters each), and a name that does not end like a weight
    /// or config file (`.pt`, `.pth`, `.bin`, `.ckpt`, `.safetensors`, `.json`). Anything else is
    /// a path (which then fails to load if it does not exist). So `./owner/name`, `/abs/path`,
    /// `dir/sub/model` and `dir/edgetam.pt` are always paths.
    pub fn parse(spec: impl AsRef<OsStr>) -> Self {
        let spec = spec.as_ref();
        let path = Path::new(spec);
        if path.exists() {
            return Self::Path(path.to_owned());
        }
        match spec.to_str() {
            Some(s) if is_repo_id(s) => Self::Hub { repo: s.to_owned() },
            _ => Self::Path(path.to_owned()),
        }
    }

    /// The local path of the model: a [`ModelSource::Path`] as it is; for a
    /// [`ModelSource::Hub`] repository, its files in the Hugging Face cache, downloaded first if
    /// they are not there (a progress bar on stderr when it is a terminal).
    ///
    /// A cached model is used without any network access. Otherwise the repository's file list
    /// is read from the hub and the transformers layout (`config.json` + `model.safetensors`,
    /// the snapshot folder is returned) is preferred over Meta's `edgetam.pt` (the file is
    /// returned). With `HF_HUB_OFFLINE=1` only the cache is read.
    ///
    /// Errors ([`HubError`], inside [`Error::Hub`](crate::Error::Hub)) name the repository and
    /// what is missing: an unknown (or private) repository, a repository without those files,
    /// an unreachable hub, an offline cache miss, a failed download.
    pub fn resolve(&self) -> Result<PathBuf> {
        match self {
            Self::Path(p) => Ok(p.clone()),
            Self::Hub { repo } => Ok(fetch(repo)?),
        }
    }
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Path(p) => write!(f, "{}", p.display()),
            Self::Hub { repo } => write!(f, "{repo}"),
        }
    }
}

/// [`ModelSource::parse`] then [`ModelSource::resolve`]: the local path for what a user typed.
pub fn resolve_model(spec: impl AsRef<OsStr>) -> Result<PathBuf> {
    ModelSource::parse(spec).resolve()
}

/// A repository id as the hub accepts it (see [`ModelSource::parse`]).
fn is_repo_id(s: &str) -> bool {
    let Some((owner, name)) = s.split_once('/') else {
        return false;
    };
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && !p.starts_with(['-', '.'])
            && !p.ends_with(['-', '.'])
            && !p.contains("--")
            && !p.contains("..")
    };
    let lower = name.to_ascii_lowercase();
    let file_like = [".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".json"]
        .iter()
        .any(|ext| lower.ends_with(ext));
    part_ok(owner) && part_ok(name) && !file_like
}

#[cfg(not(feature = "hub"))]
fn fetch(repo: &str) -> Result<PathBuf, HubError> {
    Err(HubError::Unsupported {
        repo: repo.to_owned(),
    })
}

#[cfg(feature = "hub")]
use online::fetch;

#[cfg(feature = "hub")]
mod online {
    use std::io::IsTerminal;
    use std::path::{Path, PathBuf};

    use hf_hub::api::sync::{ApiBuilder, ApiError, ApiRepo};
    use hf_hub::api::RepoInfo;
    use hf_hub::{Cache, CacheRepo, Repo};

    use super::HubError;

    /// transformers layout: both files are needed.
    const TRANSFORMERS_FILES: [&str; 2] = ["config.json", "model.safetensors"];
    /// Meta's original checkpoint (the released config is built in).
    const ORIGINAL_FILE: &str = "edgetam.pt";

    /// The environment as Hugging Face's tools read it.
    struct HubEnv {
        /// `HF_ENDPOINT`, without a trailing `/`; `None`: hf-hub's default.
        endpoint: Option<String>,
        cache: PathBuf,
        token: Option<String>,
        offline: bool,
    }

    fn var(key: &str) -> Option<String> {
        std::env::var(key)
            .ok()
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    fn var_path(key: &str) -> Option<PathBuf> {
        std::env::var_os(key)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    impl HubEnv {
        fn read(repo: &str) -> Result<Self, HubError> {
            let home = var_path("HF_HOME")
                .or_else(|| var_path("XDG_CACHE_HOME").map(|d| d.join("huggingface")))
                .or_else(|| var_path("HOME").map(|d| d.join(".cache").join("huggingface")));
            let cache = var_path("HF_HUB_CACHE")
                .or_else(|| home.as_ref().map(|h| h.join("hub")))
                .ok_or_else(|| HubError::NoCacheDir {
                    repo: repo.to_owned(),
                })?;
            // Absolute: hf-hub links snapshot files to blobs by relative paths computed from both.
            let cache = std::path::absolute(&cache).unwrap_or(cache);
            let token = var("HF_TOKEN").or_else(|| {
                let file = var_path("HF_TOKEN_PATH").or_else(|| home.map(|h| h.join("token")))?;
                let t = std::fs::read_to_string(file).ok()?;
                Some(t.trim().to_owned()).filter(|t| !t.is_empty())
            });
            let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
                matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
            });
            let endpoint = var("HF_ENDPOINT").map(|e| e.trim_end_matches('/').to_owned());
            Ok(Self {
                endpoint,
                cache,
                token,
                offline,
            })
        }

        /// How messages name the server.
        fn endpoint_name(&self) -> String {
            match &self.endpoint {
                Some(e) => format!("HF_ENDPOINT {e}"),
                None => "the hub".into(),
            }
        }
    }

    /// The model's local path: from the cache, else downloaded into it.
    pub(super) fn fetch(repo: &str) -> Result<PathBuf, HubError> {
        let env = HubEnv::read(repo)?;
        let cached = Cache::new(env.cache.clone()).repo(Repo::model(repo.to_owned()));
        if let Some(path) = from_cache(&cached) {
            tracing::debug!("hub model {repo}: cached at {}", path.display());
            return Ok(path);
        }
        if env.offline {
            return Err(HubError::NotCached {
                repo: repo.to_owned(),
                cache: env.cache,
            });
        }
        let mut builder = ApiBuilder::from_cache(Cache::new(env.cache.clone()))
            .with_progress(std::io::stderr().is_terminal())
            .with_token(env.token.clone());
        if let Some(e) = &env.endpoint {
            builder = builder.with_endpoint(e.clone());
        }
        let api = builder.build().map_err(|e| HubError::Protocol {
            repo: repo.to_owned(),
            endpoint: env.endpoint_name(),
            message: format!("cannot set up the HTTP client: {e}"),
        })?;
        let api = api.model(repo.to_owned());
        let files = file_list(&env, &api, repo)?;
        let has = |f: &str| files.iter().any(|n| n == f);
        if TRANSFORMERS_FILES.iter().all(|f| has(f)) {
            let mut paths = Vec::new();
            for file in TRANSFORMERS_FILES {
                paths.push(download(&env, &api, repo, file)?);
            }
            // Both land in the snapshot of the commit the hub served them from.
            let dir = paths[0].parent().map(Path::to_path_buf);
            match dir {
                Some(dir) if paths.iter().all(|p| p.parent() == Some(dir.as_path())) => Ok(dir),
                _ => Err(HubError::Download {
                    repo: repo.to_owned(),
                    file: TRANSFORMERS_FILES.join(" + "),
                    message: "the repository changed during the download; try again".into(),
                }),
            }
        } else if has(ORIGINAL_FILE) {
            download(&env, &api, repo, ORIGINAL_FILE)
        } else {
            let lacking: Vec<&str> = TRANSFORMERS_FILES
                .iter()
                .copied()
                .filter(|f| !has(f))
                .collect();
            let layout = match TRANSFORMERS_FILES.iter().find(|f| has(f)) {
                Some(present) => format!("{} (beside {present})", lacking.join(" + ")),
                None => lacking.join(" + "),
            };
            let missing = format!("{layout} and {ORIGINAL_FILE}");
            Err(HubError::MissingFiles {
                repo: repo.to_owned(),
                missing,
                available: files,
            })
        }
    }

    /// A complete layout already in the cache (the revision `main` points at).
    fn from_cache(cache: &CacheRepo) -> Option<PathBuf> {
        let config = cache.get(TRANSFORMERS_FILES[0]);
        let weights = cache.get(TRANSFORMERS_FILES[1]);
        if let (Some(c), Some(w)) = (config, weights) {
            if c.parent() == w.parent() {
                return w.parent().map(Path::to_path_buf);
            }
        }
        cache.get(ORIGINAL_FILE)
    }

    /// The repository's files (the hub's model info).
    fn file_list(env: &HubEnv, api: &ApiRepo, repo: &str) -> Result<Vec<String>, HubError> {
        let response = api.info_request().call().map_err(|e| match e {
            ureq::Error::Status(status @ (401 | 403 | 404), _) => HubError::RepoNotFound {
                repo: repo.to_owned(),
                endpoint: env.endpoint_name(),
                status,
            },
            ureq::Error::Status(status, r) => HubError::Protocol {
                repo: repo.to_owned(),
                endpoint: env.endpoint_name(),
                message: format!("HTTP {status} {} on the repository info", r.status_text()),
            },
            ureq::Error::Transport(t) => unreachable_error(env, repo, t.to_string()),
        })?;
        let info: RepoInfo = response.into_json().map_err(|e| HubError::Protocol {
            repo: repo.to_owned(),
            endpoint: env.endpoint_name(),
            message: format!("the repository info is not the hub's JSON: {e}"),
        })?;
        Ok(info.siblings.into_iter().map(|s| s.rfilename).collect())
    }

    fn unreachable_error(env: &HubEnv, repo: &str, message: String) -> HubError {
        HubError::Unreachable {
            repo: repo.to_owned(),
            endpoint: env.endpoint_name(),
            cache: env.cache.clone(),
            message,
        }
    }

    /// One file into the cache (hf-hub: resumable, locked, blob + snapshot link).
    fn download(env: &HubEnv, api: &ApiRepo, repo: &str, file: &str) -> Result<PathBuf, HubError> {
        tracing::info!("hub model {repo}: downloading {file}");
        let failed = |message: String| HubError::Download {
            repo: repo.to_owned(),
            file: file.to_owned(),
            message,
        };
        // hf-hub asserts on a few answers no hub gives; keep a misbehaving server from
        // unwinding through the caller (a GStreamer streaming thread, say).
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| api.get(file)))
            .map_err(|_| failed("the hub client failed on an unexpected answer".into()))?;
        result.map_err(|e| match e {
            ApiError::RequestError(e) => match *e {
                ureq::Error::Status(401 | 403, _) => failed(
                    "access denied: a gated or private repository (accept its terms on the \
                         hub, then set HF_TOKEN)"
                        .into(),
                ),
                ureq::Error::Status(status, r) => {
                    failed(format!("HTTP {status} {}", r.status_text()))
                }
                ureq::Error::Transport(t) => unreachable_error(env, repo, t.to_string()),
            },
            ApiError::IoError(e) => failed(format!(
                "cannot write the cache {}: {e}",
                env.cache.display()
            )),
            ApiError::MissingHeader(h) | ApiError::InvalidHeader(h) => failed(format!(
                "the server's answer lacks a valid `{h}` header (is HF_ENDPOINT a hub?)"
            )),
            ApiError::LockAcquisition(lock) => failed(format!(
                "another process is downloading it (lock {})",
                lock.display()
            )),
            other => failed(other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_and_paths() {
        for id in [
            "yonigozlan/EdgeTAM-hf",
            "facebook/EdgeTAM",
            "a/b",
            "my_org/model.v2",
        ] {
            assert_eq!(
                ModelSource::parse(id),
                ModelSource::Hub { repo: id.into() },
                "{id}"
            );
        }
        for path in [
            "edgetam",
            "./owner/name",
            "/owner/name",
            "owner/name/",
            "dir/sub/model",
            "dir/edgetam.pt",
            "dir/model.safetensors",
            "dir/config.JSON",
            "~/models",
            "-a/b",
            "a/b-",
            "a--b/c",
            "a/b..c",
            "a b/c",
            "owner/",
            "/name",
            "",
        ] {
            assert_eq!(
                ModelSource::parse(path),
                ModelSource::Path(path.into()),
                "{path:?}"
            );
        }
        let long = format!("o/{}", "n".repeat(97));
        assert!(matches!(ModelSource::parse(&long), ModelSource::Path(_)));
    }

    #[test]
    fn an_existing_path_wins() {
        let dir = std::env::temp_dir().join(format!("edgetam-hub-{}", std::process::id()));
        let id_like = dir.join("owner");
        std::fs::create_dir_all(id_like.join("name")).unwrap();
        let cwd_relative = Path::new("src/model");
        // A path with the shape of an id that exists (relative to the crate: `src/model`).
        assert_eq!(
            ModelSource::parse(cwd_relative),
            ModelSource::Path(cwd_relative.into())
        );
        assert_eq!(
            ModelSource::parse(id_like.join("name")).resolve().unwrap(),
            id_like.join("name")
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn messages_name_the_repo_and_the_files() {
        let e = HubError::MissingFiles {
            repo: "o/n".into(),
            missing: "model.safetensors (beside config.json) and edgetam.pt".into(),
            available: vec!["README.md".into(), "config.json".into()],
        };
        let m = e.to_string();
        assert!(m.contains("`o/n`") && m.contains("model.safetensors") && m.contains("README.md"));
    }
}
