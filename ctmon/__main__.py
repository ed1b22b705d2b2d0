from ctmon.cli import main

raise SystemExit(main())
