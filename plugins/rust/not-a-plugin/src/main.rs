fn main() { println!("I am a command, not a cojoin plugin"); }
