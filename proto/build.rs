//! Compiles `benchlake/v1/*.proto` with protox (pure Rust, no protoc) and writes
//! the encoded descriptor set used by gRPC server reflection.
use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "benchlake/v1/common.proto",
        "benchlake/v1/runs.proto",
        "benchlake/v1/agent.proto",
        "benchlake/v1/worker.proto",
        "benchlake/v1/replay.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["."])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("benchlake_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
