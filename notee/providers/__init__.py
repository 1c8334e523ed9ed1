"""Push providers behind one small interface (base.py): FCM, APNs, the local emulator, log (dry run)."""
