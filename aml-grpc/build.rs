//! Compiles `proto/aml/v1/tool_service.proto` with the pure-Rust `protox` compiler, so
//! users of this crate need no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/aml/v1/tool_service.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("aml_v1_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        // Decoded by hand-written code: its string fields arrive as bytes, so text that is
        // not UTF-8 reaches the boundary's strict parser instead of failing in the codec.
        .extern_path(".aml.v1.CallToolRequest", "crate::wire::CallToolRequest")
        .compile_fds(descriptors)?;
    Ok(())
}
