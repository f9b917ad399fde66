namespace dtrain { int placeholder_run = 0; }
