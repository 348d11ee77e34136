"""Real servers for the store tests, each started on a free loopback port in a temporary directory."""
