//! The `fullerene` command.

fn main() {
    println!("fullerene");
}
