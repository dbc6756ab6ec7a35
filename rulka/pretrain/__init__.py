"""Pretraining before RL: behaviour cloning of recorded episodes (``rulka pretrain bc``) and a
level-0 visual pretrain of the image stem on unlabeled frames (``rulka pretrain visual``). Both
write a folder that ``nn.init_from_pretrained`` loads (``rulka.nn.pretrained``); the freeze flags
then decide what keeps learning in the RL run."""
