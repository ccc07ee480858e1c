"""The test bed's own tests: its runner, its parts and stand-ins, its images and tools."""
