//! Compiles the CRI v1 protocol under `proto/` with protox (pure Rust, so no protoc is needed),
//! and the agent's brief views of two CRI answers (`proto/inplaced/brief.proto`).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["runtime/v1/api.proto", "inplaced/brief.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server half serves the CRI fault proxy in the test sandbox only.
        .build_server(std::env::var_os("CARGO_FEATURE_TEST_SUPPORT").is_some())
        .compile_fds(descriptors)?;
    Ok(())
}
