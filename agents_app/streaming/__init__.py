"""Getting frames to every connection of an instance, on any server process."""
