//! The local admin socket: `inplaced pods` and `inplaced upgrade-check` ask the running agent
//! here instead of listing the runtime and the API again. Root-only: the socket is mode 0600,
//! in a 0700 directory when the agent creates it (an existing directory, which may be shared
//! like `/run`, keeps its mode). One JSON request line in, one JSON answer out.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum AdminRequest {
    Pods,
    UpgradeCheck { to: String },
}

/// Requests longer than this are refused: the protocol has only tiny requests.
const MAX_REQUEST_BYTES: u64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("cannot create the admin socket {path}: {source}")]
    Bind {
        path: String,
        source: std::io::Error,
    },
    #[error("no agent answers on {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("admin socket {path}: {problem}")]
    Protocol {
        path: String,
        problem: ProtocolProblem,
    },
}

/// What went wrong in an exchange with an agent that accepted the connection. Not marked as
/// the `Protocol` error's source: its text is already part of that error's message.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolProblem {
    #[error("{0}")]
    EncodeRequest(serde_json::Error),
    #[error("{0}")]
    Send(std::io::Error),
    #[error("no answer within 30s")]
    NoAnswer,
    #[error("{0}")]
    Receive(std::io::Error),
    #[error("bad answer: {0}")]
    BadAnswer(serde_json::Error),
    /// The agent answered with an error: its text, as the agent wrote it.
    #[error("{0}")]
    Refused(String),
}

/// The error is a `String` on purpose: it is the text of the answer's `error` field, which the
/// client shows as-is ([`ProtocolProblem::Refused`]); the handler words it from its own errors.
pub(crate) type Handler =
    Arc<dyn Fn(AdminRequest) -> Result<serde_json::Value, String> + Send + Sync>;

/// Binds the socket (replacing a stale one, never another kind of file) with root-only
/// permissions.
pub fn bind(path: &Path) -> Result<UnixListener, AdminError> {
    let error = |source| AdminError::Bind {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(error)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path).map_err(error)?,
        Ok(_) => {
            return Err(error(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a file that is not a socket is in the way; not removing it",
            )));
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(error(err)),
    }
    let listener = UnixListener::bind(path).map_err(error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(error)?;
    Ok(listener)
}

pub async fn serve(listener: UnixListener, handler: Handler) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            if let Err(err) = answer(stream, handler).await {
                tracing::debug!(error = %err, "admin connection failed");
            }
        });
    }
}

async fn answer(stream: UnixStream, handler: Handler) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read.take(MAX_REQUEST_BYTES));
    tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no request"))??;
    let reply = match serde_json::from_str::<AdminRequest>(&line) {
        Ok(request) => match handler(request) {
            Ok(value) => serde_json::json!({ "ok": value }),
            Err(message) => serde_json::json!({ "error": message }),
        },
        Err(err) => serde_json::json!({ "error": format!("bad request: {err}") }),
    };
    write.write_all(reply.to_string().as_bytes()).await?;
    write.write_all(b"\n").await?;
    write.shutdown().await
}

/// Asks the agent at `path`. `Connect` errors mean no agent runs there.
pub async fn request(path: &Path, request: &AdminRequest) -> Result<serde_json::Value, AdminError> {
    let display = path.display().to_string();
    let mut stream = UnixStream::connect(path)
        .await
        .map_err(|source| AdminError::Connect {
            path: display.clone(),
            source,
        })?;
    let protocol = |problem: ProtocolProblem| AdminError::Protocol {
        path: display.clone(),
        problem,
    };
    let mut line =
        serde_json::to_string(request).map_err(|e| protocol(ProtocolProblem::EncodeRequest(e)))?;
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .await
        .map_err(|e| protocol(ProtocolProblem::Send(e)))?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .map_err(|_| protocol(ProtocolProblem::NoAnswer))?
        .map_err(|e| protocol(ProtocolProblem::Receive(e)))?;
    let mut value: serde_json::Value =
        serde_json::from_slice(&answer).map_err(|e| protocol(ProtocolProblem::BadAnswer(e)))?;
    if let Some(message) = value.get("error").and_then(|m| m.as_str()) {
        return Err(protocol(ProtocolProblem::Refused(message.to_owned())));
    }
    Ok(value
        .get_mut("ok")
        .map(serde_json::Value::take)
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_directory_keeps_its_mode_and_other_files_are_not_removed() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let path = shared.join("admin.sock");
        drop(bind(&path).unwrap());
        let mode = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1777, "a shared directory keeps its mode");
        // A stale socket is replaced; a regular file is refused and kept.
        drop(bind(&path).unwrap());
        let file = shared.join("notes.txt");
        std::fs::write(&file, "keep").unwrap();
        let err = bind(&file).unwrap_err();
        assert!(err.to_string().contains("not a socket"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    }

    #[tokio::test]
    async fn round_trip_and_root_only_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/admin.sock");
        let listener = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        let handler: Handler = Arc::new(|request| match request {
            AdminRequest::Pods => Ok(serde_json::json!(["p1"])),
            AdminRequest::UpgradeCheck { to } => Err(format!("unknown release {to}")),
        });
        let server = tokio::spawn(serve(listener, handler));
        assert_eq!(
            request(&path, &AdminRequest::Pods).await.unwrap(),
            serde_json::json!(["p1"])
        );
        let err = request(&path, &AdminRequest::UpgradeCheck { to: "0.1".into() })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("unknown release 0.1"), "{err}");
        assert!(
            matches!(
                err,
                AdminError::Protocol {
                    problem: ProtocolProblem::Refused(_),
                    ..
                }
            ),
            "{err:?}"
        );
        server.abort();
    }

    #[tokio::test]
    async fn no_agent_is_a_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = request(&dir.path().join("none.sock"), &AdminRequest::Pods)
            .await
            .unwrap_err();
        assert!(matches!(err, AdminError::Connect { .. }), "{err}");
    }
}
