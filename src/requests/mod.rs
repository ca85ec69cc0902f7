//! The request kinds' common layer, above the node view: how a request object is read
//! (`decode`), and the loop every kind's controller runs (`request_loop`).

mod decode;
mod request_loop;

pub(crate) use decode::pod_group;
pub use decode::{Decoded, RequestMeta, decode};
#[cfg(test)]
pub(crate) use decode::{crd_status_schema, object_from_json, schema_violations};
pub(crate) use request_loop::{
    MAX_REQUEUE as REQUEST_LOOP_IDLE, RequestController, run_request_loop,
};
