"""What runs inside a cell's own process (and inside every image): the cell, its measurements,
the environment probe and the rollback halves. It imports nothing that executes, judges,
reports or talks to GitHub."""
