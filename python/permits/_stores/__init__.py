"""What the stores of limiters kept in a server (Redis, PostgreSQL) share: the rules they keep, the
backend interface each server implements, the limiter over a backend and its per-process queue."""
