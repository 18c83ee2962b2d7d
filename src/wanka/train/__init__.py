"""Training runtime: a Llama-style decoder trained with the planner's layouts on torch.distributed
(FSDP2, TP+SP, PP), atomic DCP checkpoints, torchrun elastic recovery (docs/train.md)."""
