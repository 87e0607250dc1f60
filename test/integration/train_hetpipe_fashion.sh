#!/usr/bin/env bash
# strategy "hetpipe" end to end on Fashion-MNIST (issue 7, label slow): 4
# processes, 2 VWs x 2 stages (LeNet-5, Nm = 2, D = 0, overlapped waves), one device capped at
# 3 MiB, too small for the whole model: the plan gives it a stage that fits
# (and data parallelism counts it out), and the job trains to the
# single-device accuracy target (>= 0.86 test accuracy). hetpipe_e2e.sh has
# the checks; train_hetpipe_vgg.sh runs them with VGG-11.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/hetpipe_e2e.sh"

# Overlapped waves (the default): each VW sees the other's waves up to two
# waves late, so it needs a smaller step and one epoch more than drained
# waves did (lr 0.02, 3 epochs: 0.875 drained, 0.836 overlapped; lr 0.01, 4
# epochs overlapped: 0.869; 2026-11-26).
hetpipe_e2e fashion 8640 3 'model = "lenet5"' 'epochs = 4' 'lr = 0.01'
pass "2 VWs x 2 stages on 4 processes, n3 capped at 3 MiB: test accuracy $(json_get "$E2E_JSON" 'd["test_accuracy"]')"
