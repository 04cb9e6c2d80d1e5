"""kernel-harness adopted on Liger-Kernel 0.8.5: adapters onto Liger's forward ops and plain-torch references."""
