"""The disk weight transfer, on the trainer's side: versions written to a directory (`directory`, in files written
by `tensor_files`), where that directory lives (`location`), and the versions a server serves (`server_sync`)."""
