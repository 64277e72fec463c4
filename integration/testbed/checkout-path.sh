#!/bin/sh
# checkout-path.sh ROOT: fails (status 2, with the reason) when the checkout's path cannot be used by
# the module and the testbed: the dynamic loader splits LD_PRELOAD at spaces and colons (a module
# under such a path is never loaded), and QEMU's -virtfs option, which shares the checkout and the
# build tree with the guests, at commas. Said before anything is installed or built, not as hundreds
# of failed tests.
case "$1" in
  *[[:space:]]*|*:*|*,*)
    echo "tcp2rdma: the checkout's path '$1' contains a space, colon or comma: LD_PRELOAD cannot carry" \
         "the module from there, nor can the test VMs share it. Clone or move it to a path without them." >&2
    exit 2 ;;
esac
