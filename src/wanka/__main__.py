from wanka.cli import main

raise SystemExit(main())
