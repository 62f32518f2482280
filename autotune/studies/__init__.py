"""The Optuna studies the search runs on: journal or RDB storage, a study shared by several workers (claims,
heartbeats, retries), and the typed record of a trial."""
