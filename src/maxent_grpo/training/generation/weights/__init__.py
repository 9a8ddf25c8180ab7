"""The weight transfer, on the trainer's side: one type per transfer behind `transfer.WeightTransfer` (the disk's
versions on a server, `server_sync`; TRL's NCCL push, `nccl`; a push of your own, `callable_push`; none,
`no_transfer`), and the disk transfer's directory (`directory`, in files written by `tensor_files`) and where it lives
(`location`)."""
