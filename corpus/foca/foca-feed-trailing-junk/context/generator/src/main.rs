//! Produces context/join-attempts.md: a new member announces to a seed of clusters of growing
//! size; for each, the seed's reply is decoded (header, member count, members, what is left) and
//! handed to the joining member. Run from context/generator: `cargo run -q > ../join-attempts.md`.
//! The join itself is the oracle's (`join`); this program only formats it. Output is not edited.

#[path = "../../../oracle/tests/feed.rs"]
#[allow(dead_code)]
mod scenario;

fn main() {
    // Keep error values short: no captured backtraces in their Debug output.
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    println!("# Joining clusters of different sizes\n");
    println!("foca 0.7.0, `Config::simple()` (max_packet_size 1400), bincode codec, no custom broadcasts.");
    println!("Identities are host names like `data-017.storage.eu-west-1.internal.example.net` plus a");
    println!("generation byte. `ingest-07...` calls `announce(seed-01...)`; the seed's reply is decoded");
    println!("with the same codec and then given to the joining member's `handle_data`.\n");
    println!("| other members at seed | reply | header | member count field | members decoded | bytes after last member | joiner handle_data | joiner's members after |");
    println!("|---|---|---|---|---|---|---|---|");
    for cluster_size in [5, 20, 24, 25, 30, 40] {
        let members = scenario::symptom_members(cluster_size);
        let at = scenario::join(&scenario::symptom_seed(), &scenario::symptom_joiner(), &members, 1400);
        println!(
            "| {cluster_size} | {:?}, {} bytes | {} bytes | {} | {} | {} | {:?} | {} |",
            at.message,
            at.feed_len,
            at.header_len,
            at.count,
            at.decoded.len(),
            at.trailing,
            at.joiner_result,
            at.joiner_members.len()
        );
    }
}
