fn main() -> std::process::ExitCode {
    operon::cli::main()
}
