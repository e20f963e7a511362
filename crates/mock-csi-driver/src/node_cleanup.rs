//! NodeUnpublishVolume and NodeUnstageVolume, which the `csi` crate's proto leaves out.
//!
//! csi-sanity calls both while cleaning up after every controller test and accepts OK or
//! NOT_FOUND; without them it fails on UNIMPLEMENTED. The mock never publishes or stages a
//! volume, so undoing either is an idempotent no-op for a known volume. The messages are
//! declared here (wire facts from the CSI spec) and served by wrapping the generated
//! `NodeServer`, which keeps handling every other Node method.

use std::convert::Infallible;

use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
use prost_reflect::prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};
use tonic::codegen::{Body, BoxFuture, Context, Poll, Service, StdError, http};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};

use crate::pools::{PoolError, Pools};
use crate::service::MockDriver;

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnpublishVolumeRequest {
    #[prost(string, tag = "1")]
    pub volume_id: String,
    #[prost(string, tag = "2")]
    pub target_path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnpublishVolumeResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnstageVolumeRequest {
    #[prost(string, tag = "1")]
    pub volume_id: String,
    #[prost(string, tag = "2")]
    pub staging_target_path: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeUnstageVolumeResponse {}

/// Descriptors of the four messages above, so the call log can render them as JSON.
pub fn descriptor() -> FileDescriptorProto {
    let string_field = |name: &str, number: i32| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(Label::Optional.into()),
        r#type: Some(Type::String.into()),
        json_name: None,
        ..Default::default()
    };
    let message = |name: &str, fields: Vec<FieldDescriptorProto>| DescriptorProto {
        name: Some(name.into()),
        field: fields,
        ..Default::default()
    };
    FileDescriptorProto {
        name: Some("mock_csi_driver/node_cleanup.proto".into()),
        package: Some("csi.v1".into()),
        syntax: Some("proto3".into()),
        message_type: vec![
            message(
                "NodeUnpublishVolumeRequest",
                vec![string_field("volume_id", 1), string_field("target_path", 2)],
            ),
            message("NodeUnpublishVolumeResponse", vec![]),
            message(
                "NodeUnstageVolumeRequest",
                vec![
                    string_field("volume_id", 1),
                    string_field("staging_target_path", 2),
                ],
            ),
            message("NodeUnstageVolumeResponse", vec![]),
        ],
        ..Default::default()
    }
}

/// The answer to unpublishing or unstaging `volume_id` from `path`.
pub fn undo_answer(pools: &Pools, volume_id: &str, path: &str) -> Result<(), Status> {
    if volume_id.is_empty() {
        return Err(Status::invalid_argument("volume_id must not be empty"));
    }
    if path.is_empty() {
        return Err(Status::invalid_argument(
            "the target path must not be empty",
        ));
    }
    match pools.get(volume_id) {
        Some(_) => Ok(()),
        None => Err(Status::not_found(
            PoolError::NotFound(volume_id.to_owned()).to_string(),
        )),
    }
}

/// The Node service: the two cleanup RPCs here, everything else from the generated server.
#[derive(Clone)]
pub struct NodeService {
    driver: MockDriver,
    generated: csi::v1::node_server::NodeServer<MockDriver>,
}

impl NodeService {
    pub fn new(driver: MockDriver) -> Self {
        Self {
            generated: csi::v1::node_server::NodeServer::new(driver.clone()),
            driver,
        }
    }
}

impl NamedService for NodeService {
    const NAME: &'static str = "csi.v1.Node";
}

struct Unpublish(MockDriver);
struct Unstage(MockDriver);

impl UnaryService<NodeUnpublishVolumeRequest> for Unpublish {
    type Response = NodeUnpublishVolumeResponse;
    type Future = BoxFuture<Response<Self::Response>, Status>;

    fn call(&mut self, request: Request<NodeUnpublishVolumeRequest>) -> Self::Future {
        let driver = self.0.clone();
        Box::pin(async move {
            driver
                .node_undo("NodeUnpublishVolume", request, |pools, r| {
                    undo_answer(pools, &r.volume_id, &r.target_path)
                        .map(|()| NodeUnpublishVolumeResponse {})
                })
                .await
        })
    }
}

impl UnaryService<NodeUnstageVolumeRequest> for Unstage {
    type Response = NodeUnstageVolumeResponse;
    type Future = BoxFuture<Response<Self::Response>, Status>;

    fn call(&mut self, request: Request<NodeUnstageVolumeRequest>) -> Self::Future {
        let driver = self.0.clone();
        Box::pin(async move {
            driver
                .node_undo("NodeUnstageVolume", request, |pools, r| {
                    undo_answer(pools, &r.volume_id, &r.staging_target_path)
                        .map(|()| NodeUnstageVolumeResponse {})
                })
                .await
        })
    }
}

impl<B> Service<http::Request<B>> for NodeService
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let driver = self.driver.clone();
        match req.uri().path() {
            "/csi.v1.Node/NodeUnpublishVolume" => Box::pin(async move {
                let mut grpc = Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(Unpublish(driver), req).await)
            }),
            "/csi.v1.Node/NodeUnstageVolume" => Box::pin(async move {
                let mut grpc = Grpc::new(tonic_prost::ProstCodec::default());
                Ok(grpc.unary(Unstage(driver), req).await)
            }),
            _ => self.generated.call(req),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_pool;
    use tonic::Code;

    #[test]
    fn undo_is_ok_for_known_volumes_only() {
        let mut pools = Pools::new(vec![parse_pool(":1Gi").unwrap()]);
        let req = crate::pools::CreateRequest {
            name: "v".into(),
            ..Default::default()
        };
        let (v, _) = pools.create(&req).unwrap();
        let code = |id: &str, path: &str| undo_answer(&pools, id, path).err().map(|s| s.code());
        assert_eq!(code(&v.id, "/t"), None);
        assert_eq!(code("nope", "/t"), Some(Code::NotFound));
        assert_eq!(code("", "/t"), Some(Code::InvalidArgument));
        assert_eq!(code(&v.id, ""), Some(Code::InvalidArgument));
    }
}
