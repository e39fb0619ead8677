//! The benchlake gRPC protocol, package `benchlake.v1`: generated messages,
//! clients and servers, plus the descriptor set for server reflection, and the
//! one mapping of the launcher enum to the domain's ([`launcher`]).
#![allow(clippy::large_enum_variant, clippy::doc_lazy_continuation)]

/// Generated code of `benchlake.v1`.
pub mod v1 {
    tonic::include_proto!("benchlake.v1");
}

/// Encoded `FileDescriptorSet` of every benchlake proto (for tonic-reflection).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/benchlake_descriptor.bin"));

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: v1::ProtocolVersion = v1::ProtocolVersion::ProtocolVersion1;

/// prost, for callers that encode messages themselves (the agent's Slurm job book).
pub use prost;

pub mod catalog;
pub mod client;
pub mod launcher;
pub mod obs;
pub mod retry;
