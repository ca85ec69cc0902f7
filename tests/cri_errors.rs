//! Clear errors for a socket that does not exist and for servers that are not CRI v1 runtimes.

use std::time::Duration;

use inplaced::cri::proto::image_service_server::{ImageService, ImageServiceServer};
use inplaced::cri::proto::*;
use inplaced::cri::{CriClient, CriConfig, CriEndpoint, CriError};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Response, Status};

fn client_for(path: &std::path::Path) -> CriClient {
    let mut config = CriConfig::new(CriEndpoint::parse(path.to_str().unwrap()).unwrap());
    config.max_attempts = 2;
    config.call_timeout = Duration::from_secs(3);
    CriClient::new(config)
}

#[tokio::test]
async fn missing_socket_is_unavailable_and_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing-here.sock");
    let err = client_for(&path).version().await.unwrap_err();
    assert!(matches!(err, CriError::Unavailable { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("nothing-here.sock"), "{text}");
    assert!(text.contains("No such file or directory"), "{text}");
}

/// A gRPC server with only the image service: what a v1alpha2-only runtime looks like to a v1
/// client (every runtime.v1 method is Unimplemented).
struct ImagesOnly;

#[tonic::async_trait]
impl ImageService for ImagesOnly {
    async fn list_images(
        &self,
        _: Request<ListImagesRequest>,
    ) -> Result<Response<ListImagesResponse>, Status> {
        Ok(Response::new(ListImagesResponse::default()))
    }
    async fn image_status(
        &self,
        _: Request<ImageStatusRequest>,
    ) -> Result<Response<ImageStatusResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn pull_image(
        &self,
        _: Request<PullImageRequest>,
    ) -> Result<Response<PullImageResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn remove_image(
        &self,
        _: Request<RemoveImageRequest>,
    ) -> Result<Response<RemoveImageResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
    async fn image_fs_info(
        &self,
        _: Request<ImageFsInfoRequest>,
    ) -> Result<Response<ImageFsInfoResponse>, Status> {
        Err(Status::unimplemented("test"))
    }
}

#[tokio::test]
async fn grpc_server_without_runtime_v1_is_not_cri_v1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1alpha2-only.sock");
    let incoming = UnixListenerStream::new(UnixListener::bind(&path).unwrap());
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ImageServiceServer::new(ImagesOnly))
            .serve_with_incoming(incoming),
    );
    let client = client_for(&path);
    let err = client.version().await.unwrap_err();
    assert!(matches!(err, CriError::NotCriV1 { .. }), "{err}");
    assert!(err.to_string().contains("does not speak CRI v1"), "{err}");
    assert!(err.to_string().contains("Unimplemented"), "{err}");
    // The same connection still serves what the server does implement.
    assert!(client.list_images().await.unwrap().is_empty());
    server.abort();
}

#[tokio::test]
async fn server_that_is_not_grpc_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("http1.sock");
    let listener = UnixListener::bind(&path).unwrap();
    // Answers every connection like an HTTP/1 server would: reads the request, says 400, hangs up.
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).await;
            let _ = stream
                .write_all(
                    b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
                )
                .await;
        }
    });
    let err = client_for(&path).version().await.unwrap_err();
    assert!(matches!(err, CriError::NotCriV1 { .. }), "{err}");
    assert!(err.to_string().contains("HTTP/1.1 400"), "{err}");
    server.abort();
}
