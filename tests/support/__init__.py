"""What the tests share: stacks on loopback ports, helpers, stub servers and
fake platforms (never a test of their own)."""
