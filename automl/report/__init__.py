"""What people look at: the HTML report and its figures, the CLI tables, the dashboard."""
